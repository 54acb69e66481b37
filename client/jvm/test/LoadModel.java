import dev.ferry.FerryClient;
import dev.ferry.FerryException;
import dev.ferry.FerryModel;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Loads a model through the Java binding and compares its output with a reference: run by
 * tests/tests/e2e/bindings/jvm.rs against a real server. Arguments: server, trust.json, cache folder,
 * input file, shape (comma-separated), expected-output file (both whitespace-separated
 * floats), tolerance.
 */
public final class LoadModel {
    static float[] floats(Path p) throws Exception {
        String[] parts = Files.readString(p).trim().split("\\s+");
        float[] out = new float[parts.length];
        for (int i = 0; i < parts.length; i++) {
            out[i] = Float.parseFloat(parts[i]);
        }
        return out;
    }

    public static void main(String[] args) throws Exception {
        String trust = Files.readString(Path.of(args[1]));
        float[] input = floats(Path.of(args[3]));
        String[] dims = args[4].split(",");
        long[] shape = new long[dims.length];
        for (int i = 0; i < dims.length; i++) {
            shape[i] = Long.parseLong(dims[i]);
        }
        float[] expected = floats(Path.of(args[5]));
        double atol = Double.parseDouble(args[6]);
        String device = "{\"install_id\":\"jvm-test\",\"platform\":\"android\",\"ram_mb\":8192}";
        int exit;
        // A byte budget of 1 on an empty cache: refused before anything is fetched.
        try (FerryClient tight = new FerryClient(args[0], trust, args[2] + "-budget", "1.0.0")) {
            tight.load("demo-mlp", device, "{\"max_download_bytes\":1}").close();
            System.out.println("a load over the byte budget did not fail");
            System.exit(1);
        } catch (FerryException e) {
            System.out.println("over budget: code=" + e.code());
        }
        try (FerryClient client = new FerryClient(args[0], trust, args[2], "1.0.0");
                FerryModel model = client.load("demo-mlp", device)) {
            float[] out = model.run(input, shape);
            float[] again = model.run(input, shape);
            if (out.length != expected.length || !java.util.Arrays.equals(out, again)) {
                System.out.println("length " + out.length + " != " + expected.length
                        + " or a second run differs");
                exit = 1;
            } else {
                double max = 0;
                for (int i = 0; i < out.length; i++) {
                    max = Math.max(max, Math.abs((double) out[i] - expected[i]));
                }
                System.out.println("variant=" + model.variant() + " release=" + model.release()
                        + " delegate=" + model.delegate() + " source=" + model.source()
                        + " max_abs_diff=" + max);
                System.out.println("report=" + model.reportJson());
                exit = max <= atol ? 0 : 1;
            }
            try {
                model.run(input, new long[] {1, input.length + 1});
                System.out.println("a wrong shape was not refused");
                exit = 1;
            } catch (IllegalArgumentException e) {
                System.out.println("wrong shape: " + e.getMessage());
            }
            // The same elements in one flat dimension break the signed contract: refused by
            // the client before the runtime, with input_mismatch.
            System.out.println("contract=" + model.contractJson());
            try {
                model.run(input, new long[] {input.length});
                System.out.println("an input against the contract was not refused");
                exit = 1;
            } catch (FerryException e) {
                System.out.println("against the contract: code=" + e.code());
            }
            try {
                client.load("no-such-model", device);
                System.out.println("loading a missing model did not fail");
                exit = 1;
            } catch (FerryException e) {
                System.out.println("missing model: status=" + e.status() + " code=" + e.code());
            }
        }
        // Both handles are closed (freed) here, before the exit.
        System.exit(exit);
    }
}

import dev.ferry.FerryClient;
import dev.ferry.FerryException;
import dev.ferry.FerryModel;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Loads a model through the Java binding and compares its output with a reference: run by
 * tests/tests/jvm.rs against a real server. Arguments: server, trust.json, cache folder,
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
        try (FerryClient client = new FerryClient(args[0], trust, args[2], "1.0.0");
                FerryModel model = client.load("demo-mlp", device)) {
            float[] out = model.run(input, shape);
            double max = 0;
            if (out.length != expected.length) {
                System.out.println("length " + out.length + " != " + expected.length);
                System.exit(1);
            }
            for (int i = 0; i < out.length; i++) {
                max = Math.max(max, Math.abs((double) out[i] - expected[i]));
            }
            System.out.println("variant=" + model.variant() + " release=" + model.release()
                    + " delegate=" + model.delegate() + " source=" + model.source()
                    + " max_abs_diff=" + max);
            System.out.println("report=" + model.reportJson());
            try {
                client.load("no-such-model", device);
                System.out.println("loading a missing model did not fail");
                System.exit(1);
            } catch (FerryException e) {
                System.out.println("missing model: status=" + e.status() + " code=" + e.code());
            }
            System.exit(max <= atol ? 0 : 1);
        }
    }
}

import dev.ferry.FerryClient;
import dev.ferry.FerryException;
import dev.ferry.FerryModel;
import dev.ferry.Tensor;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * Runs a model with typed tensors through the Java binding: run by tests/tests/e2e/bindings/jvm_typed.rs against a
 * real server. Arguments: server, trust.json, cache folder, model, method, inputs file. Each
 * line of the inputs file is one tensor: its element type (float32, float16, bfloat16, int8,
 * int16, int32, int64, uint8, bool, float64), its shape (comma-separated, "-" for a scalar) and
 * its values. Prints each output as "out DTYPE SHAPE VALUES..." (float16 and bfloat16 as
 * floats, bool as 0/1).
 */
public final class TypedModel {
    static Tensor parse(String line) {
        String[] parts = line.trim().split("\\s+");
        String dtype = parts[0];
        long[] shape = parts[1].equals("-") ? new long[0]
                : java.util.Arrays.stream(parts[1].split(",")).mapToLong(Long::parseLong).toArray();
        int n = parts.length - 2;
        double[] v = new double[n];
        for (int i = 0; i < n; i++) {
            v[i] = Double.parseDouble(parts[i + 2]);
        }
        float[] f = new float[n];
        for (int i = 0; i < n; i++) {
            f[i] = (float) v[i];
        }
        switch (dtype) {
            case "float32":
                return Tensor.ofFloats(f, shape);
            case "float64":
                return Tensor.ofDoubles(v, shape);
            case "float16":
                return Tensor.ofFloat16(f, shape);
            case "bfloat16":
                return Tensor.ofBFloat16(f, shape);
            case "int64": {
                long[] x = new long[n];
                for (int i = 0; i < n; i++) {
                    x[i] = (long) v[i];
                }
                return Tensor.ofLongs(x, shape);
            }
            case "int32": {
                int[] x = new int[n];
                for (int i = 0; i < n; i++) {
                    x[i] = (int) v[i];
                }
                return Tensor.ofInts(x, shape);
            }
            case "int16": {
                short[] x = new short[n];
                for (int i = 0; i < n; i++) {
                    x[i] = (short) v[i];
                }
                return Tensor.ofShorts(x, shape);
            }
            case "int8":
            case "uint8": {
                byte[] x = new byte[n];
                for (int i = 0; i < n; i++) {
                    x[i] = (byte) (int) v[i];
                }
                return Tensor.ofBytes(dtype.equals("int8") ? Tensor.DType.INT8 : Tensor.DType.UINT8,
                        x, shape);
            }
            case "bool": {
                boolean[] x = new boolean[n];
                for (int i = 0; i < n; i++) {
                    x[i] = v[i] != 0;
                }
                return Tensor.ofBooleans(x, shape);
            }
            default:
                throw new IllegalArgumentException("unknown element type " + dtype);
        }
    }

    static String show(Tensor t) {
        StringBuilder b = new StringBuilder("out ");
        b.append(t.dtype().name().toLowerCase(java.util.Locale.ROOT)).append(' ');
        long[] shape = t.shape();
        if (shape.length == 0) {
            b.append('-');
        }
        for (int i = 0; i < shape.length; i++) {
            b.append(i == 0 ? "" : ",").append(shape[i]);
        }
        for (double v : t.toDoubles()) {
            b.append(' ').append(v);
        }
        return b.toString();
    }

    public static void main(String[] args) throws Exception {
        String trust = Files.readString(Path.of(args[1]));
        String model = args[3];
        String method = args[4];
        List<Tensor> inputs = new ArrayList<>();
        for (String line : Files.readAllLines(Path.of(args[5]))) {
            if (!line.isBlank()) {
                inputs.add(parse(line));
            }
        }
        String device = "{\"install_id\":\"jvm-typed\",\"platform\":\"linux\",\"ram_mb\":8192}";
        int exit = 0;
        try (FerryClient client = new FerryClient(args[0], trust, args[2], "1.0.0")) {
            exit = use(client, client.load(model, device), method, inputs);
            // The model's run timings (queued when it closed) go with the next send.
            long[] sent = client.sendTelemetry();
            System.out.println("telemetry sent=" + sent[0] + " queued=" + sent[1]);
        }
        System.exit(exit);
    }

    /** Reads the model's metadata, runs it, and closes it; returns the exit code. */
    static int use(FerryClient client, FerryModel model, String method, List<Tensor> inputs) {
        int exit = 0;
        try (FerryModel m = model) {
            String[] labels = m.labels();
            System.out.println("labels " + (labels == null ? "none" : String.join(",", labels)));
            dev.ferry.Preprocess p = m.preprocess();
            if (p != null) {
                System.out.println("preprocess " + p.resizeWidth + "x" + p.resizeHeight + " "
                        + p.filter + " " + p.color + " " + p.layout + " "
                        + java.util.Arrays.toString(p.range) + " "
                        + java.util.Arrays.toString(p.mean) + " "
                        + java.util.Arrays.toString(p.std));
            }
            System.out.println("asset " + m.assetPath("digits-labels.txt"));
            if (m.assetPath("digits-labels.txt") != null) {
                byte[] bytes = m.readAsset("digits-labels.txt");
                System.out.println("asset bytes " + bytes.length + " "
                        + new String(bytes, java.nio.charset.StandardCharsets.UTF_8)
                                .split("\n")[0]);
            }
            try {
                m.readAsset("absent.txt");
                System.out.println("an absent asset was read");
                exit = 1;
            } catch (FerryException e) {
                System.out.println("absent asset: code=" + e.code());
            }
            client.setThermalState("serious");
            System.out.println("metric recorded for " + client.recordMetric("accepted", 1.0) + " model(s)");
            try {
                client.recordMetric("Not A Name", 1.0);
                System.out.println("a bad metric name was not refused");
                exit = 1;
            } catch (FerryException e) {
                System.out.println("metric refused: code=" + e.code());
            }
            try {
                client.setThermalState("hot");
                System.out.println("an unknown thermal state was not refused");
                exit = 1;
            } catch (FerryException e) {
                System.out.println("thermal refused: code=" + e.code());
            }
            Tensor[] out = m.run(method, inputs.toArray(new Tensor[0]));
            for (Tensor t : out) {
                System.out.println(show(t));
            }
            // One input too few: refused with the reason, not a crash.
            try {
                m.run(method, inputs.subList(0, inputs.size() - 1).toArray(new Tensor[0]));
                System.out.println("a missing input was not refused");
                exit = 1;
            } catch (FerryException e) {
                System.out.println("refused: code=" + e.code() + " " + e.getMessage());
            }
        }
        return exit;
    }
}

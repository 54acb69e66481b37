import dev.ferry.Device;
import dev.ferry.ErrorCode;
import dev.ferry.FerryClient;
import dev.ferry.FerryException;
import dev.ferry.FerryModel;
import dev.ferry.LoadMode;
import dev.ferry.LoadOptions;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

/**
 * The typed JVM API an Android app would use: a Device and LoadOptions built with builders, an
 * asynchronous load, error codes as an enum.
 *
 * usage: TypedApi SERVER TRUST_FILE CACHE_DIR CODE... (the catalogue's codes, to check the enum)
 */
public final class TypedApi {
    public static void main(String[] args) throws Exception {
        String trust = Files.readString(Path.of(args[1]));
        // Every code of the catalogue is a member; a code from a newer library is UNKNOWN.
        int known = 0;
        for (int i = 3; i < args.length; i++) {
            ErrorCode c = ErrorCode.of(args[i]);
            if (c == ErrorCode.UNKNOWN || !c.code().equals(args[i])) {
                System.out.println("not in the enum: " + args[i]);
            } else {
                known++;
            }
        }
        System.out.println("known codes=" + known);
        System.out.println("future code=" + ErrorCode.of("a_code_from_2031") + " null=" + ErrorCode.of(null));
        try {
            Device.builder("", "android");
        } catch (IllegalArgumentException e) {
            System.out.println("empty install id: " + e.getMessage());
        }
        try {
            new LoadOptions.Probe(0, 20, 2000);
        } catch (IllegalArgumentException e) {
            System.out.println("bad probe: " + e.getMessage());
        }

        Device device = Device.builder("typed-" + ProcessHandle.current().pid(), "android")
                .osVersion("14")
                .deviceModel("Pixel \"8\" \u00e9")
                .soc("Tensor G3")
                .ramMb(8192)
                .build();
        LoadOptions cachedFirst = LoadOptions.builder()
                .mode(LoadMode.CACHED_OR_DOWNLOAD)
                .unmetered(true)
                .powerSaver(false)
                .build();
        System.out.println("options=" + cachedFirst.toJson());
        try (FerryClient bad = new FerryClient(args[0], trust, args[2], "1.0.0", "{\"cache_budget_bytes\": 5}")) {
            System.out.println("bad client options accepted: " + bad);
        } catch (FerryException e) {
            System.out.println("bad client options: " + e.errorCode());
        }
        try (FerryClient client = new FerryClient(
                args[0], trust, args[2], "1.0.0", "{\"cache_budget_bytes\": 67108864, \"connect_timeout_ms\": 5000}")) {
            CompletableFuture<FerryModel> pending = client.loadAsync("demo-mlp", device, cachedFirst);
            try (FerryModel m = pending.get(120, TimeUnit.SECONDS)) {
                System.out.println("async variant=" + m.variant() + " source=" + m.source());
                float[] out = m.run(new float[32], new long[] {2, 16});
                System.out.println("outputs=" + out.length);
            }
            try (FerryModel again = client.load("demo-mlp", device, cachedFirst)) {
                System.out.println("again source=" + again.source());
            }
            // A misspelt key and an empty install id are refused before anything is sent.
            for (String json : new String[] {
                    "{\"install_id\":\"x\",\"platform\":\"linux\",\"ram_MB\":2048}",
                    "{\"install_id\":\" \",\"platform\":\"linux\"}"}) {
                try {
                    client.load("demo-mlp", json);
                    System.out.println("accepted " + json);
                } catch (FerryException e) {
                    System.out.println("refused device: " + e.errorCode() + " " + e.getMessage());
                }
            }
            try {
                client.loadAsync("no-such-model", device, LoadOptions.DEFAULT).get(120, TimeUnit.SECONDS);
                System.out.println("missing model loaded?");
            } catch (ExecutionException e) {
                FerryException f = (FerryException) e.getCause();
                System.out.println("missing model: errorCode=" + f.errorCode() + " code=" + f.code());
            }
        }
    }
}

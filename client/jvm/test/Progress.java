import dev.ferry.Device;
import dev.ferry.FerryClient;
import dev.ferry.FerryModel;
import dev.ferry.LoadOptions;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Download progress in a JVM app: a listener sees every step of a load running on the
 * client's background thread, while the main thread (an app's UI thread) asks the same client
 * for the progress and sets the thermal state without waiting for the load.
 *
 * usage: Progress SERVER TRUST_FILE CACHE_DIR MODEL
 * prints: calls=N backwards=B last=DONE/TOTAL mid_polls=M slowest_poll_ms=T variant=V
 */
public final class Progress {
    public static void main(String[] args) throws Exception {
        String trust = Files.readString(Path.of(args[1]));
        AtomicLong calls = new AtomicLong();
        AtomicLong backwards = new AtomicLong();
        AtomicLong lastDone = new AtomicLong();
        AtomicLong lastTotal = new AtomicLong();
        try (FerryClient client = new FerryClient(args[0], trust, args[2], "1.0.0")) {
            long[] before = client.progress();
            if (before[0] != 0 || before[1] != 0) {
                throw new AssertionError("progress before any download");
            }
            client.setProgressListener((variant, done, total) -> {
                if (variant == null || done > total || done < lastDone.get()) {
                    backwards.incrementAndGet();
                }
                calls.incrementAndGet();
                lastDone.set(done);
                lastTotal.set(total);
            });
            CompletableFuture<FerryModel> load = client.loadAsync(
                    args[3], Device.builder("jvm-progress", "linux").build(), LoadOptions.DEFAULT);
            long midPolls = 0;
            long slowest = 0;
            while (!load.isDone()) {
                long t0 = System.nanoTime();
                long[] p = client.progress();
                client.setThermalState("fair");
                slowest = Math.max(slowest, (System.nanoTime() - t0) / 1_000_000);
                if (p[1] > 0 && p[0] > 0 && p[0] < p[1]) {
                    midPolls++;
                }
                Thread.sleep(2);
            }
            try (FerryModel model = load.get(60, TimeUnit.SECONDS)) {
                client.setProgressListener(null);
                System.out.println("calls=" + calls.get() + " backwards=" + backwards.get()
                        + " last=" + lastDone.get() + "/" + lastTotal.get()
                        + " mid_polls=" + midPolls + " slowest_poll_ms=" + slowest
                        + " variant=" + model.variant());
            }
        }
    }
}

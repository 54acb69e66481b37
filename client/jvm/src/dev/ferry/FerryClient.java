package dev.ferry;

import com.sun.jna.Pointer;
import com.sun.jna.ptr.PointerByReference;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.locks.ReentrantReadWriteLock;

/**
 * A ferry client: resolves, downloads, verifies, caches and loads models. Close it when done
 * (models it loaded stay valid until they are closed themselves). It may be used from several
 * threads at once: a UI thread asks for {@link #progress()} while a worker loads; only
 * {@link #close()} waits for the calls in progress.
 */
public final class FerryClient implements AutoCloseable {
    private volatile Pointer handle;
    private ExecutorService loader;
    /** Calls hold it shared; close holds it alone, so a handle is never freed under a call. */
    private final ReentrantReadWriteLock lock = new ReentrantReadWriteLock();
    /** The callback the library holds (kept reachable here, or the JVM would collect it). */
    private Ferry.ProgressCallback progressCallback;

    /**
     * A client of {@code server} trusting {@code trustJson} (the content of the server's
     * {@code keys/trust.json}, pinned in the app), caching in {@code cacheDir}.
     */
    public FerryClient(String server, String trustJson, String cacheDir, String appVersion) {
        this(server, trustJson, cacheDir, appVersion, null);
    }

    /**
     * A client with options as JSON ({@code null} for the defaults): {@code cache_budget_bytes},
     * {@code root_certificates_file} or {@code root_certificates_pem} (a fleet's private CA for
     * HTTPS), {@code connect_timeout_ms}, {@code response_timeout_ms}, {@code method},
     * {@code max_telemetry_events}, {@code telemetry_autosend}, {@code time_runs},
     * {@code storage_headroom_bytes}, {@code delta_updates}, {@code compressed_downloads},
     * {@code reverify_after_secs}; see
     * {@code ferry_client_new_with} in {@code ferry.h}. Bad options throw {@code config_invalid}.
     */
    public FerryClient(
            String server, String trustJson, String cacheDir, String appVersion, String optionsJson) {
        PointerByReference out = new PointerByReference();
        Ferry.check(Ferry.LIB.ferry_client_new_with(
                server, trustJson, cacheDir, appVersion, optionsJson, out));
        handle = out.getValue();
    }

    /**
     * Loads {@code model} for the device described by {@code deviceJson}
     * ({@code {"install_id", "platform", "os_version", "device_model", "soc", "ram_mb",
     * "claimed_backends"}}), falling back through the candidates.
     */
    public FerryModel load(String model, String deviceJson) {
        return load(model, deviceJson, null);
    }

    /** The open handle, with the shared lock held; the caller unlocks. */
    private Pointer open() {
        lock.readLock().lock();
        if (handle == null) {
            lock.readLock().unlock();
            throw new IllegalStateException("the client is closed");
        }
        return handle;
    }

    /**
     * {@link #load(String, String)} with load options as JSON ({@code null} for the defaults):
     * {@code mode} ({@code latest}, {@code cached_or_download}, {@code cached_then_update}),
     * {@code require_unmetered}, {@code require_charging}, {@code max_download_bytes}, the
     * device's {@code unmetered}, {@code charging} and {@code power_saver} now, and
     * {@code probe} ({@code {}} for the defaults: time the top candidates once per release,
     * never in power-saving mode). A download the policy does not allow throws
     * {@code download_deferred} when nothing is cached.
     */
    public FerryModel load(String model, String deviceJson, String optionsJson) {
        Pointer h = open();
        try {
            PointerByReference out = new PointerByReference();
            Ferry.check(Ferry.LIB.ferry_load_with(h, model, deviceJson, optionsJson, out));
            return new FerryModel(out.getValue());
        } finally {
            lock.readLock().unlock();
        }
    }

    /**
     * Sets (or with {@code null} clears) the listener of download progress. It is called on
     * the thread that downloads, for every file of the variant being loaded.
     */
    public void setProgressListener(ProgressListener listener) {
        Pointer h = open();
        try {
            synchronized (this) {
                Ferry.ProgressCallback cb = listener == null
                        ? null
                        : (userData, variant, done, total) -> listener.onProgress(variant, done, total);
                Ferry.check(Ferry.LIB.ferry_client_set_progress(h, cb, null));
                progressCallback = cb;
            }
        } finally {
            lock.readLock().unlock();
        }
    }

    /**
     * The latest download progress: {@code {done, total}} bytes of the variant being (or last)
     * downloaded, {@code {0, 0}} before any download. Never waits for a load: call it from the
     * UI thread.
     */
    public long[] progress() {
        Pointer h = open();
        try {
            com.sun.jna.ptr.LongByReference done = new com.sun.jna.ptr.LongByReference();
            com.sun.jna.ptr.LongByReference total = new com.sun.jna.ptr.LongByReference();
            Ferry.check(Ferry.LIB.ferry_client_progress(h, done, total));
            return new long[] {done.getValue(), total.getValue()};
        } finally {
            lock.readLock().unlock();
        }
    }

    /** Loads {@code model} for {@code device} with the default options. */
    public FerryModel load(String model, Device device) {
        return load(model, device, LoadOptions.DEFAULT);
    }

    /** Loads {@code model} for {@code device} with {@code options}. */
    public FerryModel load(String model, Device device, LoadOptions options) {
        return load(model, device.toJson(), options.toJson());
    }

    /**
     * {@link #load(String, Device, LoadOptions)} on the client's own background thread (a load
     * downloads and verifies: never on an app's UI thread). The future fails with the
     * {@link FerryException} the load threw.
     */
    public CompletableFuture<FerryModel> loadAsync(String model, Device device, LoadOptions options) {
        return loadAsync(model, device, options, loader());
    }

    /** {@link #loadAsync(String, Device, LoadOptions)} on the app's {@code executor}. */
    public CompletableFuture<FerryModel> loadAsync(
            String model, Device device, LoadOptions options, Executor executor) {
        String deviceJson = device.toJson();
        String optionsJson = options.toJson();
        return CompletableFuture.supplyAsync(() -> load(model, deviceJson, optionsJson), executor);
    }

    private synchronized ExecutorService loader() {
        if (handle == null) {
            throw new IllegalStateException("the client is closed");
        }
        if (loader == null) {
            loader = Executors.newSingleThreadExecutor(r -> {
                Thread t = new Thread(r, "ferry-load");
                t.setDaemon(true);
                return t;
            });
        }
        return loader;
    }

    /**
     * Queues the loaded models' run timings since the last flush as {@code inference} events
     * and sends the queued telemetry; returns {@code {sent, queued}}. Blocking network I/O:
     * call it from a background thread. The events stay queued when the server cannot be
     * reached.
     */
    public long[] sendTelemetry() {
        Pointer h = open();
        try {
            com.sun.jna.Memory sent = Ferry.sizeOut();
            com.sun.jna.Memory queued = Ferry.sizeOut();
            Ferry.check(Ferry.LIB.ferry_client_send_telemetry(h, sent, queued));
            return new long[] {Ferry.sizeIn(sent), Ferry.sizeIn(queued)};
        } finally {
            lock.readLock().unlock();
        }
    }

    /**
     * Forgets the crashes recorded for {@code model} (null: every model), so the variants that
     * crashed this app natively on an earlier launch are tried again on the next load; returns
     * how many were forgotten. Without this a crashed variant is passed over (attempt code
     * {@code crashed}) until the app, runtime or OS version changes.
     */
    public long forgetCrashes(String model) {
        Pointer h = open();
        try {
            com.sun.jna.Memory forgotten = Ferry.sizeOut();
            Ferry.check(Ferry.LIB.ferry_client_forget_crashes(h, model, forgotten));
            return Ferry.sizeIn(forgotten);
        } finally {
            lock.readLock().unlock();
        }
    }

    /**
     * The device's thermal state ({@code "nominal"}, {@code "fair"}, {@code "serious"},
     * {@code "critical"}; null when not known). On Android map {@code PowerManager}'s states:
     * none and light to nominal, moderate to fair, severe to serious, critical, emergency and
     * shutdown to critical.
     */
    public void setThermalState(String state) {
        Pointer h = open();
        try {
            Ferry.check(Ferry.LIB.ferry_client_set_thermal_state(h, state));
        } finally {
            lock.readLock().unlock();
        }
    }

    /**
     * Records one value of the app metric {@code name} (for example {@code "accepted"}, 1.0 or
     * 0.0) against every model this client has loaded and not closed; returns how many took it
     * (0: none is loaded). Values are averaged per telemetry send and go out with each model's
     * receipt; experiments compare them between arms. Names are 1 to 64 characters of
     * {@code [a-z0-9_.-]} starting with a letter; values are finite, within 1e12 either way.
     */
    public long recordMetric(String name, double value) {
        Pointer h = open();
        try {
            com.sun.jna.Memory models = Ferry.sizeOut();
            Ferry.check(Ferry.LIB.ferry_client_record_metric(h, name, value, models));
            return Ferry.sizeIn(models);
        } finally {
            lock.readLock().unlock();
        }
    }

    @Override
    public void close() {
        synchronized (this) {
            if (loader != null) {
                // Loads queued after this fail with "the client is closed".
                loader.shutdown();
                loader = null;
            }
        }
        // Waits for the calls in progress (a running load finishes first).
        lock.writeLock().lock();
        try {
            if (handle != null) {
                Ferry.LIB.ferry_client_free(handle);
                handle = null;
                progressCallback = null;
            }
        } finally {
            lock.writeLock().unlock();
        }
    }
}

package dev.ferry;

import com.sun.jna.Pointer;
import com.sun.jna.ptr.PointerByReference;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

/**
 * A ferry client: resolves, downloads, verifies, caches and loads models. Close it when done
 * (models it loaded stay valid until they are closed themselves). Calls are serialised on the
 * object.
 */
public final class FerryClient implements AutoCloseable {
    private Pointer handle;
    private ExecutorService loader;

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
     * {@code max_telemetry_events}, {@code telemetry_autosend}, {@code time_runs}; see
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
    public synchronized FerryModel load(String model, String deviceJson) {
        return load(model, deviceJson, null);
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
    public synchronized FerryModel load(String model, String deviceJson, String optionsJson) {
        if (handle == null) {
            throw new IllegalStateException("the client is closed");
        }
        PointerByReference out = new PointerByReference();
        Ferry.check(Ferry.LIB.ferry_load_with(handle, model, deviceJson, optionsJson, out));
        return new FerryModel(out.getValue());
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
    public synchronized long[] sendTelemetry() {
        if (handle == null) {
            throw new IllegalStateException("the client is closed");
        }
        com.sun.jna.Memory sent = Ferry.sizeOut();
        com.sun.jna.Memory queued = Ferry.sizeOut();
        Ferry.check(Ferry.LIB.ferry_client_send_telemetry(handle, sent, queued));
        return new long[] {Ferry.sizeIn(sent), Ferry.sizeIn(queued)};
    }

    /**
     * The device's thermal state ({@code "nominal"}, {@code "fair"}, {@code "serious"},
     * {@code "critical"}; null when not known). On Android map {@code PowerManager}'s states:
     * none and light to nominal, moderate to fair, severe to serious, critical, emergency and
     * shutdown to critical.
     */
    public synchronized void setThermalState(String state) {
        if (handle == null) {
            throw new IllegalStateException("the client is closed");
        }
        Ferry.check(Ferry.LIB.ferry_client_set_thermal_state(handle, state));
    }

    @Override
    public synchronized void close() {
        if (loader != null) {
            // Loads queued after this fail with "the client is closed"; one running now has
            // finished (close waits for the client's lock).
            loader.shutdown();
            loader = null;
        }
        if (handle != null) {
            Ferry.LIB.ferry_client_free(handle);
            handle = null;
        }
    }
}

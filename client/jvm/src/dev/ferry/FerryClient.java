package dev.ferry;

import com.sun.jna.Pointer;
import com.sun.jna.ptr.PointerByReference;

/**
 * A ferry client: resolves, downloads, verifies, caches and loads models. Close it when done
 * (models it loaded stay valid until they are closed themselves).
 */
public final class FerryClient implements AutoCloseable {
    private Pointer handle;

    /**
     * A client of {@code server} trusting {@code trustJson} (the content of the server's
     * {@code keys/trust.json}, pinned in the app), caching in {@code cacheDir}.
     */
    public FerryClient(String server, String trustJson, String cacheDir, String appVersion) {
        PointerByReference out = new PointerByReference();
        Ferry.check(Ferry.LIB.ferry_client_new(server, trustJson, cacheDir, appVersion, out));
        handle = out.getValue();
    }

    /**
     * Loads {@code model} for the device described by {@code deviceJson}
     * ({@code {"install_id", "platform", "os_version", "device_model", "soc", "ram_mb",
     * "claimed_backends"}}), falling back through the candidates.
     */
    public FerryModel load(String model, String deviceJson) {
        if (handle == null) {
            throw new IllegalStateException("the client is closed");
        }
        PointerByReference out = new PointerByReference();
        Ferry.check(Ferry.LIB.ferry_load(handle, model, deviceJson, out));
        return new FerryModel(out.getValue());
    }

    @Override
    public void close() {
        if (handle != null) {
            Ferry.LIB.ferry_client_free(handle);
            handle = null;
        }
    }
}

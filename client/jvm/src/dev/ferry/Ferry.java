package dev.ferry;

import com.sun.jna.Library;
import com.sun.jna.Native;
import com.sun.jna.Pointer;
import com.sun.jna.ptr.PointerByReference;

/**
 * Java access to ferry's client through its C ABI ({@code client/include/ferry.h}), loaded with
 * JNA from {@code libferry_client_ffi.so} (found on {@code jna.library.path}). Use
 * {@link FerryClient} and {@link FerryModel}; this class holds the raw bindings.
 */
public final class Ferry {
    private Ferry() {}

    /** The C functions, one for one. Sizes ({@code size_t}) are {@code long} on 64-bit targets. */
    interface Native64 extends Library {
        int ferry_client_new(String server, String trustJson, String cacheDir, String appVersion,
                PointerByReference out);

        void ferry_client_free(Pointer client);

        int ferry_load(Pointer client, String model, String deviceJson, PointerByReference out);

        String ferry_model_info(Pointer model, int field);

        int ferry_model_run_f32(Pointer model, float[] input, long[] shape, long ndim,
                float[] output, long outputCapacity, long[] outputLen);

        void ferry_model_free(Pointer model);

        String ferry_last_error_code();

        String ferry_last_error_message();
    }

    static final Native64 LIB = Native.load("ferry_client_ffi", Native64.class);

    /** {@code FERRY_OK}. */
    static final int OK = 0;
    /** {@code FERRY_ERR_BUFFER_TOO_SMALL}. */
    static final int BUFFER_TOO_SMALL = 7;

    /** Throws the calling thread's last error when {@code status} is not {@code FERRY_OK}. */
    static void check(int status) {
        if (status != OK) {
            throw new FerryException(status, LIB.ferry_last_error_code(),
                    LIB.ferry_last_error_message());
        }
    }
}

package dev.ferry;

import com.sun.jna.IntegerType;
import com.sun.jna.Library;
import com.sun.jna.Memory;
import com.sun.jna.Native;
import com.sun.jna.Pointer;
import com.sun.jna.Structure;
import com.sun.jna.ptr.LongByReference;
import com.sun.jna.ptr.PointerByReference;
import java.util.Map;

/**
 * Java access to ferry's client through its C ABI ({@code client/include/ferry.h}), loaded with
 * JNA from {@code libferry_client_ffi.so} (found on {@code jna.library.path}). Use
 * {@link FerryClient} and {@link FerryModel}; this class holds the raw bindings.
 */
public final class Ferry {
    private Ferry() {}

    /** A C {@code size_t}: 4 or 8 bytes as the platform has it. */
    public static final class SizeT extends IntegerType {
        private static final long serialVersionUID = 1L;

        /** Zero. */
        public SizeT() {
            this(0);
        }

        /** {@code value} as a {@code size_t}. */
        public SizeT(long value) {
            super(Native.SIZE_T_SIZE, value, true);
        }
    }

    /** Room for one {@code size_t} written by the library. */
    static Memory sizeOut() {
        Memory m = new Memory(Native.SIZE_T_SIZE);
        m.clear();
        return m;
    }

    /** The {@code size_t} in {@code m}. */
    static long sizeIn(Memory m) {
        return Native.SIZE_T_SIZE == 8 ? m.getLong(0) : (m.getInt(0) & 0xffffffffL);
    }

    /** {@code struct ferry_tensor}: element type, shape, row-major bytes. */
    @Structure.FieldOrder({"dtype", "shape", "ndim", "data", "nbytes"})
    public static class CTensor extends Structure {
        /** A {@code FERRY_DTYPE_*} code. */
        public int dtype;
        /** {@code ndim} int64 dimensions. */
        public Pointer shape;
        /** How many dimensions. */
        public SizeT ndim = new SizeT();
        /** The elements. */
        public Pointer data;
        /** Their size in bytes. */
        public SizeT nbytes = new SizeT();
    }

    /** {@code struct ferry_preprocess}, filled by {@code ferry_model_preprocess}. */
    @Structure.FieldOrder({"resize_width", "resize_height", "resize_filter", "color", "layout",
            "has_range", "range_low", "range_high", "mean_len", "mean", "std_len", "std"})
    public static class CPreprocess extends Structure {
        /** Resize width (0: none). */
        public int resize_width;
        /** Resize height (0: none). */
        public int resize_height;
        /** A {@code FERRY_FILTER_*} code. */
        public int resize_filter;
        /** A {@code FERRY_COLOR_*} code. */
        public int color;
        /** A {@code FERRY_LAYOUT_*} code. */
        public int layout;
        /** C {@code bool}: whether the range is given. */
        public byte has_range;
        /** Where 8-bit 0 lands. */
        public double range_low;
        /** Where 8-bit 255 lands. */
        public double range_high;
        /** How many means are given. */
        public int mean_len;
        /** The means. */
        public double[] mean = new double[4];
        /** How many standard deviations are given. */
        public int std_len;
        /** The standard deviations. */
        public double[] std = new double[4];
    }

    /** {@code ferry_progress_fn}: called on the thread that downloads. */
    interface ProgressCallback extends com.sun.jna.Callback {
        /** One step of a download: bytes of the variant's files on disk of {@code total}. */
        void invoke(Pointer userData, String variant, long done, long total);
    }

    /** The C functions, one for one. */
    interface Native64 extends Library {
        int ferry_client_new(String server, String trustJson, String cacheDir, String appVersion,
                PointerByReference out);

        int ferry_client_new_with(String server, String trustJson, String cacheDir,
                String appVersion, String optionsJson, PointerByReference out);

        void ferry_client_free(Pointer client);

        int ferry_client_send_telemetry(Pointer client, Pointer sent, Pointer queued);

        int ferry_client_set_thermal_state(Pointer client, String state);

        int ferry_client_record_metric(Pointer client, String name, double value, Pointer models);

        int ferry_client_forget_crashes(Pointer client, String model, Pointer forgotten);

        int ferry_client_set_progress(Pointer client, ProgressCallback callback,
                Pointer userData);

        int ferry_client_progress(Pointer client, LongByReference done, LongByReference total);

        int ferry_load(Pointer client, String model, String deviceJson, PointerByReference out);

        int ferry_load_with(Pointer client, String model, String deviceJson, String optionsJson,
                PointerByReference out);

        String ferry_model_info(Pointer model, int field);

        int ferry_model_preprocess(Pointer model, CPreprocess out);

        String ferry_model_asset_path(Pointer model, String name);

        int ferry_model_read_asset(Pointer model, String name, long offset, byte[] out,
                SizeT cap, Pointer read, LongByReference size);

        int ferry_model_run_f32(Pointer model, float[] input, long[] shape, SizeT ndim,
                float[] output, SizeT outputCapacity, Pointer outputLen);

        int ferry_model_run(Pointer model, String method, CTensor inputs, SizeT nInputs,
                PointerByReference out);

        SizeT ferry_outputs_len(Pointer outputs);

        int ferry_outputs_get(Pointer outputs, SizeT index, CTensor tensor);

        void ferry_outputs_free(Pointer outputs);

        void ferry_model_free(Pointer model);

        String ferry_last_error_code();

        String ferry_last_error_message();
    }

    /** Strings cross as UTF-8 whatever the JVM's default charset (paths, messages). */
    static final Native64 LIB = Native.load("ferry_client_ffi", Native64.class,
            Map.of(Library.OPTION_STRING_ENCODING, "UTF-8"));

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

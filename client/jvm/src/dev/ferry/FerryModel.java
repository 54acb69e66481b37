package dev.ferry;

import com.sun.jna.Pointer;

/** A model loaded into the ExecuTorch runtime. Close it to free the runtime's memory. */
public final class FerryModel implements AutoCloseable {
    private Pointer handle;

    FerryModel(Pointer handle) {
        this.handle = handle;
    }

    private Pointer live() {
        if (handle == null) {
            throw new IllegalStateException("the model is closed");
        }
        return handle;
    }

    /** The variant that loaded. */
    public String variant() {
        return Ferry.LIB.ferry_model_info(live(), 0);
    }

    /** The release version. */
    public String release() {
        return Ferry.LIB.ferry_model_info(live(), 1);
    }

    /** The variant's delegate. */
    public String delegate() {
        return Ferry.LIB.ferry_model_info(live(), 2);
    }

    /** {@code downloaded}, {@code cached} or {@code last_known_good:<code>}. */
    public String source() {
        return Ferry.LIB.ferry_model_info(live(), 4);
    }

    /** The load report as JSON (see docs/client.md). */
    public String reportJson() {
        return Ferry.LIB.ferry_model_info(live(), 5);
    }

    /**
     * Runs the loaded method on one float32 input of {@code shape} and returns its first
     * output (float32).
     */
    public float[] run(float[] input, long[] shape) {
        long[] len = new long[1];
        int status = Ferry.LIB.ferry_model_run_f32(live(), input, shape, shape.length, null, 0, len);
        if (status != Ferry.BUFFER_TOO_SMALL && status != Ferry.OK) {
            Ferry.check(status);
        }
        float[] out = new float[(int) len[0]];
        Ferry.check(Ferry.LIB.ferry_model_run_f32(live(), input, shape, shape.length, out,
                out.length, len));
        return out;
    }

    @Override
    public void close() {
        if (handle != null) {
            Ferry.LIB.ferry_model_free(handle);
            handle = null;
        }
    }
}

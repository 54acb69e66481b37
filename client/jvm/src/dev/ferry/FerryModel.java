package dev.ferry;

import com.sun.jna.Memory;
import com.sun.jna.Pointer;

/**
 * A model loaded into the ExecuTorch runtime. Close it to free the runtime's memory. Calls are
 * serialised on the object (the runtime's method is not reentrant).
 */
public final class FerryModel implements AutoCloseable {
    private Pointer handle;
    private int outputHint = 1;

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
    public synchronized String variant() {
        return Ferry.LIB.ferry_model_info(live(), 0);
    }

    /** The release version. */
    public synchronized String release() {
        return Ferry.LIB.ferry_model_info(live(), 1);
    }

    /** The variant's delegate. */
    public synchronized String delegate() {
        return Ferry.LIB.ferry_model_info(live(), 2);
    }

    /** {@code downloaded}, {@code cached} or {@code last_known_good:<code>}. */
    public synchronized String source() {
        return Ferry.LIB.ferry_model_info(live(), 4);
    }

    /** The load report as JSON (see docs/client.md). */
    public synchronized String reportJson() {
        return Ferry.LIB.ferry_model_info(live(), 5);
    }

    /**
     * Runs the loaded method on one float32 input of {@code shape} and returns its first
     * output (float32). {@code input} must hold exactly the product of {@code shape} values.
     */
    public synchronized float[] run(float[] input, long[] shape) {
        long n = 1;
        for (long d : shape) {
            if (d < 0) {
                throw new IllegalArgumentException("negative dimension " + d);
            }
            n = Math.multiplyExact(n, d);
        }
        if (n != input.length) {
            throw new IllegalArgumentException("shape holds " + n + " values, the input has "
                    + input.length);
        }
        Memory len = Ferry.sizeOut();
        // The output size is learnt once (a too-small buffer says how much it needs) and
        // reused, so a run executes the method once.
        float[] out = new float[outputHint];
        int status = Ferry.LIB.ferry_model_run_f32(live(), input, shape,
                new Ferry.SizeT(shape.length), out, new Ferry.SizeT(out.length), len);
        if (status == Ferry.BUFFER_TOO_SMALL) {
            outputHint = (int) Ferry.sizeIn(len);
            out = new float[outputHint];
            status = Ferry.LIB.ferry_model_run_f32(live(), input, shape,
                    new Ferry.SizeT(shape.length), out, new Ferry.SizeT(out.length), len);
        }
        Ferry.check(status);
        int got = (int) Ferry.sizeIn(len);
        return got == out.length ? out : java.util.Arrays.copyOf(out, got);
    }

    @Override
    public synchronized void close() {
        if (handle != null) {
            Ferry.LIB.ferry_model_free(handle);
            handle = null;
        }
    }
}

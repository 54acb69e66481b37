package dev.ferry;

import com.sun.jna.Memory;
import com.sun.jna.Pointer;
import com.sun.jna.ptr.LongByReference;
import com.sun.jna.ptr.PointerByReference;
import java.nio.ByteBuffer;

/**
 * A model loaded into the ExecuTorch runtime. Close it to free the runtime's memory. Calls are
 * serialised on the object (the runtime's method is not reentrant).
 */
public final class FerryModel implements AutoCloseable {
    private Pointer handle;
    private int outputHint = 1;
    private String[] labels;

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
     * Each method's signed input and output contract as JSON ({@code {"forward": {"inputs":
     * [...], "outputs": [...]}}}; each tensor has {@code dtype}, {@code shape}, {@code
     * dim_order} and {@code dynamism}); {@code "null"} for a release signed before ferry
     * recorded it. An input that breaks it is refused with {@code input_mismatch}.
     */
    public synchronized String contractJson() {
        return Ferry.LIB.ferry_model_info(live(), 6);
    }

    /**
     * The class labels in output order, from the release's signed labels file; {@code null}
     * when the release has none.
     */
    public synchronized String[] labels() {
        if (labels == null) {
            String text = Ferry.LIB.ferry_model_info(live(), 7);
            labels = text == null || text.isEmpty() ? new String[0] : text.split("\n", -1);
        }
        return labels.length == 0 ? null : labels.clone();
    }

    /**
     * How to prepare the first input from an image, as the release signed it; {@code null}
     * when the release declares none.
     */
    public synchronized Preprocess preprocess() {
        Ferry.CPreprocess c = new Ferry.CPreprocess();
        if (Ferry.LIB.ferry_model_preprocess(live(), c) != Ferry.OK) {
            return null;
        }
        c.read();
        return new Preprocess(c);
    }

    /**
     * The verified file of the variant's asset {@code name} (a labels file, a tokenizer) in
     * the cache, valid while the model is open; {@code null} when it has no such asset.
     */
    public synchronized String assetPath(String name) {
        return Ferry.LIB.ferry_model_asset_path(live(), name);
    }

    /**
     * Reads up to {@code out.length} bytes of the variant's asset {@code name} from byte
     * {@code offset} into {@code out}; returns how many (0 at the end). For a sealed variant the
     * asset is decrypted as it is read (its cached file is ciphertext); for others these are
     * the file's bytes. Throws {@link FerryException} (code {@code not_found}) for a variant
     * without such an asset.
     */
    public synchronized int readAsset(String name, long offset, byte[] out) {
        Memory read = Ferry.sizeOut();
        LongByReference size = new LongByReference();
        Ferry.check(Ferry.LIB.ferry_model_read_asset(live(), name, offset, out,
                new Ferry.SizeT(out.length), read, size));
        return (int) Ferry.sizeIn(read);
    }

    /**
     * The whole of the variant's asset {@code name} (at most 256 MiB; read larger ones with
     * {@link #readAsset(String, long, byte[])}), decrypted for a sealed variant.
     */
    public synchronized byte[] readAsset(String name) {
        LongByReference size = new LongByReference();
        Memory read = Ferry.sizeOut();
        Ferry.check(Ferry.LIB.ferry_model_read_asset(live(), name, 0, new byte[0],
                new Ferry.SizeT(0), read, size));
        long total = size.getValue();
        if (total > (256L << 20)) {
            throw new IllegalStateException(
                    "asset " + name + " has " + total + " bytes; read it in pieces");
        }
        byte[] all = new byte[(int) total];
        int done = 0;
        while (done < all.length) {
            byte[] piece = new byte[Math.min(1 << 20, all.length - done)];
            int n = readAsset(name, done, piece);
            if (n == 0) {
                break;
            }
            System.arraycopy(piece, 0, all, done, n);
            done += n;
        }
        return all;
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

    /**
     * Runs {@code method} (null: the loaded one; another is loaded on first use) on tensors of
     * any element type and returns every output. The method's input count and element types are
     * checked before anything runs; a refusal is a {@link FerryException} with the reason.
     */
    public synchronized Tensor[] run(String method, Tensor... inputs) {
        Pointer model = live();
        // Native copies of the shapes and elements, referenced until the call returns.
        Memory[] keep = new Memory[inputs.length * 2];
        Ferry.CTensor first = null;
        if (inputs.length > 0) {
            Ferry.CTensor[] c = (Ferry.CTensor[]) new Ferry.CTensor().toArray(inputs.length);
            for (int i = 0; i < inputs.length; i++) {
                Tensor t = inputs[i];
                long[] shape = t.shape();
                c[i].dtype = t.dtype().code;
                c[i].ndim = new Ferry.SizeT(shape.length);
                if (shape.length > 0) {
                    keep[2 * i] = new Memory(8L * shape.length);
                    keep[2 * i].write(0, shape, 0, shape.length);
                    c[i].shape = keep[2 * i];
                }
                ByteBuffer raw = t.raw();
                int n = raw.remaining();
                c[i].nbytes = new Ferry.SizeT(n);
                if (n > 0) {
                    byte[] bytes = new byte[n];
                    raw.get(bytes);
                    keep[2 * i + 1] = new Memory(n);
                    keep[2 * i + 1].write(0, bytes, 0, n);
                    c[i].data = keep[2 * i + 1];
                }
                c[i].write();
            }
            first = c[0];
        }
        PointerByReference out = new PointerByReference();
        Ferry.check(Ferry.LIB.ferry_model_run(model, method, first,
                new Ferry.SizeT(inputs.length), out));
        java.lang.ref.Reference.reachabilityFence(keep);
        Pointer outputs = out.getValue();
        try {
            int count = Ferry.LIB.ferry_outputs_len(outputs).intValue();
            Tensor[] result = new Tensor[count];
            for (int i = 0; i < count; i++) {
                Ferry.CTensor t = new Ferry.CTensor();
                Ferry.check(Ferry.LIB.ferry_outputs_get(outputs, new Ferry.SizeT(i), t));
                int ndim = t.ndim.intValue();
                long[] shape = ndim == 0 ? new long[0] : t.shape.getLongArray(0, ndim);
                int nbytes = Math.toIntExact(t.nbytes.longValue());
                byte[] bytes = nbytes == 0 ? new byte[0] : t.data.getByteArray(0, nbytes);
                result[i] = new Tensor(Tensor.DType.of(t.dtype), shape, ByteBuffer.wrap(bytes));
            }
            return result;
        } finally {
            Ferry.LIB.ferry_outputs_free(outputs);
        }
    }

    @Override
    public synchronized void close() {
        if (handle != null) {
            Ferry.LIB.ferry_model_free(handle);
            handle = null;
        }
    }
}

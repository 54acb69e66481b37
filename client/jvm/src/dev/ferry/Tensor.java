package dev.ferry;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;

/**
 * A tensor for {@link FerryModel#run(String, Tensor...)}: an element type, a shape and the
 * elements, row-major, in the platform's byte order (what the C ABI's {@code ferry_tensor}
 * carries). Make one with the {@code of...} factories and read one with the accessor for its
 * type; float16 and bfloat16 are converted from and to {@code float} (or taken as raw 16-bit
 * values with {@link #ofBits}).
 */
public final class Tensor {
    /** Element types, with their {@code FERRY_DTYPE_*} codes. */
    public enum DType {
        /** 32-bit float. */
        FLOAT32(0, 4),
        /** 64-bit float. */
        FLOAT64(1, 8),
        /** IEEE 754 half precision. */
        FLOAT16(2, 2),
        /** bfloat16 (the top half of a float32). */
        BFLOAT16(3, 2),
        /** Signed 8-bit integer. */
        INT8(4, 1),
        /** Signed 16-bit integer. */
        INT16(5, 2),
        /** Signed 32-bit integer. */
        INT32(6, 4),
        /** Signed 64-bit integer. */
        INT64(7, 8),
        /** Unsigned 8-bit integer. */
        UINT8(8, 1),
        /** Boolean, one byte (0 or 1). */
        BOOL(9, 1);

        /** The {@code FERRY_DTYPE_*} code. */
        public final int code;
        /** Bytes per element. */
        public final int size;

        DType(int code, int size) {
            this.code = code;
            this.size = size;
        }

        /** The type with this code. */
        public static DType of(int code) {
            for (DType d : values()) {
                if (d.code == code) {
                    return d;
                }
            }
            throw new IllegalArgumentException("no element type has code " + code);
        }
    }

    private final DType dtype;
    private final long[] shape;
    private final ByteBuffer data;

    Tensor(DType dtype, long[] shape, ByteBuffer data) {
        long n = count(shape);
        if (n * dtype.size != data.remaining()) {
            throw new IllegalArgumentException("shape " + Arrays.toString(shape) + " holds " + n
                    + " " + dtype + " values; " + data.remaining() + " bytes were given");
        }
        this.dtype = dtype;
        this.shape = shape.clone();
        this.data = data.slice().order(ByteOrder.nativeOrder());
    }

    private static long count(long[] shape) {
        long n = 1;
        for (long d : shape) {
            if (d < 0) {
                throw new IllegalArgumentException("negative dimension " + d);
            }
            n = Math.multiplyExact(n, d);
        }
        return n;
    }

    private static ByteBuffer buffer(long elements, DType t, int given) {
        if (elements != given) {
            throw new IllegalArgumentException("the shape holds " + elements + " values; "
                    + given + " were given");
        }
        return ByteBuffer.allocate(Math.toIntExact(elements * t.size)).order(ByteOrder.nativeOrder());
    }

    /** A float32 tensor. */
    public static Tensor ofFloats(float[] v, long... shape) {
        ByteBuffer b = buffer(count(shape), DType.FLOAT32, v.length);
        b.asFloatBuffer().put(v);
        return new Tensor(DType.FLOAT32, shape, b);
    }

    /** A float64 tensor. */
    public static Tensor ofDoubles(double[] v, long... shape) {
        ByteBuffer b = buffer(count(shape), DType.FLOAT64, v.length);
        b.asDoubleBuffer().put(v);
        return new Tensor(DType.FLOAT64, shape, b);
    }

    /** A float16 tensor from floats, rounded to the nearest half (ties to even). */
    public static Tensor ofFloat16(float[] v, long... shape) {
        short[] bits = new short[v.length];
        for (int i = 0; i < v.length; i++) {
            bits[i] = toHalf(v[i]);
        }
        return ofBits(DType.FLOAT16, bits, shape);
    }

    /** A bfloat16 tensor from floats, rounded to the nearest bfloat16 (ties to even). */
    public static Tensor ofBFloat16(float[] v, long... shape) {
        short[] bits = new short[v.length];
        for (int i = 0; i < v.length; i++) {
            bits[i] = toBFloat16(v[i]);
        }
        return ofBits(DType.BFLOAT16, bits, shape);
    }

    /** A 16-bit tensor (int16, or float16/bfloat16 as raw bits). */
    public static Tensor ofBits(DType t, short[] v, long... shape) {
        if (t.size != 2 || t == DType.BOOL) {
            throw new IllegalArgumentException(t + " does not have 16-bit elements");
        }
        ByteBuffer b = buffer(count(shape), t, v.length);
        b.asShortBuffer().put(v);
        return new Tensor(t, shape, b);
    }

    /** An int16 tensor. */
    public static Tensor ofShorts(short[] v, long... shape) {
        return ofBits(DType.INT16, v, shape);
    }

    /** An int32 tensor. */
    public static Tensor ofInts(int[] v, long... shape) {
        ByteBuffer b = buffer(count(shape), DType.INT32, v.length);
        b.asIntBuffer().put(v);
        return new Tensor(DType.INT32, shape, b);
    }

    /** An int64 tensor (values must be below 2^53 in magnitude). */
    public static Tensor ofLongs(long[] v, long... shape) {
        ByteBuffer b = buffer(count(shape), DType.INT64, v.length);
        b.asLongBuffer().put(v);
        return new Tensor(DType.INT64, shape, b);
    }

    /** An int8 or uint8 tensor (for uint8, bytes are read as 0..255). */
    public static Tensor ofBytes(DType t, byte[] v, long... shape) {
        if (t != DType.INT8 && t != DType.UINT8) {
            throw new IllegalArgumentException("ofBytes makes int8 or uint8, not " + t);
        }
        ByteBuffer b = buffer(count(shape), t, v.length);
        b.put(v);
        b.flip();
        return new Tensor(t, shape, b);
    }

    /** A bool tensor. */
    public static Tensor ofBooleans(boolean[] v, long... shape) {
        ByteBuffer b = buffer(count(shape), DType.BOOL, v.length);
        for (boolean x : v) {
            b.put((byte) (x ? 1 : 0));
        }
        b.flip();
        return new Tensor(DType.BOOL, shape, b);
    }

    /** The element type. */
    public DType dtype() {
        return dtype;
    }

    /** The dimensions (a copy). */
    public long[] shape() {
        return shape.clone();
    }

    /** How many elements. */
    public int elements() {
        return data.remaining() / dtype.size;
    }

    /** The elements as bytes in the platform's byte order (a read-only view). */
    ByteBuffer raw() {
        return data.asReadOnlyBuffer().order(ByteOrder.nativeOrder());
    }

    private void need(DType... types) {
        for (DType t : types) {
            if (t == dtype) {
                return;
            }
        }
        throw new IllegalStateException("the tensor is " + dtype + ", not "
                + Arrays.toString(types));
    }

    /** The elements of a float32, float16 or bfloat16 tensor as floats. */
    public float[] floats() {
        need(DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16);
        float[] out = new float[elements()];
        if (dtype == DType.FLOAT32) {
            raw().asFloatBuffer().get(out);
            return out;
        }
        short[] bits = new short[out.length];
        raw().asShortBuffer().get(bits);
        for (int i = 0; i < out.length; i++) {
            out[i] = dtype == DType.FLOAT16 ? fromHalf(bits[i])
                    : Float.intBitsToFloat((bits[i] & 0xffff) << 16);
        }
        return out;
    }

    /** The elements of a float64 tensor. */
    public double[] doubles() {
        need(DType.FLOAT64);
        double[] out = new double[elements()];
        raw().asDoubleBuffer().get(out);
        return out;
    }

    /** The elements of an int16 tensor, or the raw bits of a float16 or bfloat16 one. */
    public short[] shorts() {
        need(DType.INT16, DType.FLOAT16, DType.BFLOAT16);
        short[] out = new short[elements()];
        raw().asShortBuffer().get(out);
        return out;
    }

    /** The elements of an int32 tensor. */
    public int[] ints() {
        need(DType.INT32);
        int[] out = new int[elements()];
        raw().asIntBuffer().get(out);
        return out;
    }

    /** The elements of an int64 tensor. */
    public long[] longs() {
        need(DType.INT64);
        long[] out = new long[elements()];
        raw().asLongBuffer().get(out);
        return out;
    }

    /** The elements of an int8 or uint8 tensor (uint8 values above 127 read as negative bytes). */
    public byte[] bytes() {
        need(DType.INT8, DType.UINT8);
        byte[] out = new byte[elements()];
        raw().get(out);
        return out;
    }

    /** The elements of a bool tensor. */
    public boolean[] booleans() {
        need(DType.BOOL);
        byte[] b = new byte[elements()];
        raw().get(b);
        boolean[] out = new boolean[b.length];
        for (int i = 0; i < b.length; i++) {
            out[i] = b[i] != 0;
        }
        return out;
    }

    /** The elements of any tensor as doubles (uint8 read as 0..255, bool as 0 or 1). */
    public double[] toDoubles() {
        double[] out = new double[elements()];
        ByteBuffer r = raw();
        switch (dtype) {
            case FLOAT32, FLOAT16, BFLOAT16 -> {
                float[] f = floats();
                for (int i = 0; i < out.length; i++) {
                    out[i] = f[i];
                }
            }
            case FLOAT64 -> r.asDoubleBuffer().get(out);
            case INT8, BOOL -> {
                for (int i = 0; i < out.length; i++) {
                    out[i] = r.get(i);
                }
            }
            case UINT8 -> {
                for (int i = 0; i < out.length; i++) {
                    out[i] = r.get(i) & 0xff;
                }
            }
            case INT16 -> {
                short[] s = shorts();
                for (int i = 0; i < out.length; i++) {
                    out[i] = s[i];
                }
            }
            case INT32 -> {
                int[] s = ints();
                for (int i = 0; i < out.length; i++) {
                    out[i] = s[i];
                }
            }
            case INT64 -> {
                long[] s = longs();
                for (int i = 0; i < out.length; i++) {
                    out[i] = s[i];
                }
            }
        }
        return out;
    }

    /** IEEE 754 half bits to float. */
    static float fromHalf(short h) {
        int bits = h & 0xffff;
        int sign = (bits & 0x8000) << 16;
        int exp = (bits >>> 10) & 0x1f;
        int mant = bits & 0x3ff;
        if (exp == 0x1f) {
            return Float.intBitsToFloat(sign | 0x7f800000 | (mant << 13));
        }
        if (exp == 0) {
            // Zero or subnormal: mant * 2^-24.
            float v = mant * 0x1.0p-24f;
            return sign != 0 ? -v : v;
        }
        return Float.intBitsToFloat(sign | ((exp + 112) << 23) | (mant << 13));
    }

    /** Float to IEEE 754 half bits, round to nearest, ties to even. */
    static short toHalf(float f) {
        int bits = Float.floatToRawIntBits(f);
        int sign = (bits >>> 16) & 0x8000;
        int exp = (bits >>> 23) & 0xff;
        int mant = bits & 0x7fffff;
        if (exp == 0xff) {
            // Infinity stays infinity; NaN stays a (quiet) NaN.
            return (short) (sign | 0x7c00 | (mant != 0 ? 0x200 | (mant >>> 13) : 0));
        }
        int e = exp - 127 + 15;
        if (e >= 0x1f) {
            return (short) (sign | 0x7c00);
        }
        if (e <= 0) {
            if (e < -10) {
                return (short) sign;
            }
            // Subnormal half: shift the full significand into place and round.
            int m = mant | 0x800000;
            int shift = 14 - e;
            int half = m >>> shift;
            int rest = m & ((1 << shift) - 1);
            int mid = 1 << (shift - 1);
            if (rest > mid || (rest == mid && (half & 1) != 0)) {
                half++;
            }
            return (short) (sign | half);
        }
        int half = (e << 10) | (mant >>> 13);
        int rest = mant & 0x1fff;
        if (rest > 0x1000 || (rest == 0x1000 && (half & 1) != 0)) {
            // A carry out of the significand moves into the exponent, up to infinity.
            half++;
        }
        return (short) (sign | half);
    }

    /** Float to bfloat16 bits, round to nearest, ties to even (NaN stays NaN). */
    static short toBFloat16(float f) {
        int bits = Float.floatToRawIntBits(f);
        if (Float.isNaN(f)) {
            return (short) ((bits >>> 16) | 0x40);
        }
        int rounded = bits + 0x7fff + ((bits >>> 16) & 1);
        return (short) (rounded >>> 16);
    }
}

package dev.ferry;

/**
 * How the app prepares a model's first input from an image, as its release signed it: resize
 * to {@link #resizeWidth} by {@link #resizeHeight} with {@link #filter}, order the channels as
 * {@link #color}, map 8-bit values 0 and 255 onto {@link #range}, subtract {@link #mean} and
 * divide by {@link #std} per channel, and lay the tensor out as {@link #layout}. Names are the
 * manifest's ({@code bilinear}, {@code rgb}, {@code nchw}); {@code "other"} is a value signed by
 * a newer ferry that this binding does not know; {@code null} (or 0, or an empty array) is a
 * part the release does not declare.
 */
public final class Preprocess {
    /** Resize width in pixels; 0 when the release names no resize. */
    public final int resizeWidth;
    /** Resize height in pixels; 0 when the release names no resize. */
    public final int resizeHeight;
    /** {@code nearest}, {@code bilinear}, {@code bicubic}, {@code area}, {@code lanczos}. */
    public final String filter;
    /** {@code rgb}, {@code bgr} or {@code gray}. */
    public final String color;
    /** {@code nchw} or {@code nhwc}. */
    public final String layout;
    /** {@code [low, high]}: where 8-bit 0 and 255 land; {@code null} when not declared. */
    public final double[] range;
    /** One value for every channel, or one per channel; empty when not declared. */
    public final double[] mean;
    /** One value for every channel, or one per channel; empty when not declared. */
    public final double[] std;

    Preprocess(Ferry.CPreprocess c) {
        resizeWidth = c.resize_width;
        resizeHeight = c.resize_height;
        filter = name(c.resize_filter, "nearest", "bilinear", "bicubic", "area", "lanczos");
        color = name(c.color, "rgb", "bgr", "gray");
        layout = name(c.layout, "nchw", "nhwc");
        range = c.has_range != 0 ? new double[] {c.range_low, c.range_high} : null;
        mean = java.util.Arrays.copyOf(c.mean, Math.min(c.mean_len, 4));
        std = java.util.Arrays.copyOf(c.std, Math.min(c.std_len, 4));
    }

    /** The C enum value {@code code} by name: 0 is unset, 1.. the names in order. */
    private static String name(int code, String... names) {
        if (code == 0) {
            return null;
        }
        return code <= names.length ? names[code - 1] : "other";
    }
}

package dev.ferry;

/** A failed ferry call: the C status, the stable error code and the message. */
public final class FerryException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final int status;
    private final String code;

    FerryException(int status, String code, String message) {
        super(code + ": " + message);
        this.status = status;
        this.code = code;
    }

    /** The {@code ferry_status} value (see {@code ferry.h}). */
    public int status() {
        return status;
    }

    /**
     * The stable error code as the library gave it ({@code offline_no_cache},
     * {@code all_candidates_failed}, ...), also when this binding does not know it.
     */
    public String code() {
        return code;
    }

    /**
     * The error code as an enum to switch on: {@link ErrorCode#UNKNOWN} for a code this binding
     * does not know (a newer library's), whose text {@link #code()} still gives.
     */
    public ErrorCode errorCode() {
        return ErrorCode.of(code);
    }
}

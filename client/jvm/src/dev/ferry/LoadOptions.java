package dev.ferry;

/**
 * Load options: the load mode, when downloads may start, the device's conditions now and the
 * on-device probe. Build with {@link #builder()}; immutable. Unset conditions are unknown,
 * which does not satisfy a policy that requires them.
 */
public final class LoadOptions {
    /** The defaults: {@link LoadMode#LATEST}, no download conditions, no probe. */
    public static final LoadOptions DEFAULT = builder().build();

    private final LoadMode mode;
    private final boolean requireUnmetered;
    private final boolean requireCharging;
    private final Long maxDownloadBytes;
    private final Boolean unmetered;
    private final Boolean charging;
    private final Boolean powerSaver;
    private final Probe probe;

    private LoadOptions(Builder b) {
        this.mode = b.mode;
        this.requireUnmetered = b.requireUnmetered;
        this.requireCharging = b.requireCharging;
        this.maxDownloadBytes = b.maxDownloadBytes;
        this.unmetered = b.unmetered;
        this.charging = b.charging;
        this.powerSaver = b.powerSaver;
        this.probe = b.probe;
    }

    /** A builder with the defaults. */
    public static Builder builder() {
        return new Builder();
    }

    /** The load mode. */
    public LoadMode mode() {
        return mode;
    }

    /** The on-device probe, or null when off. */
    public Probe probe() {
        return probe;
    }

    /** The JSON form {@code ferry_load_with} takes. */
    public String toJson() {
        StringBuilder b = new StringBuilder("{\"mode\":").append(Json.str(mode.wire()));
        b.append(",\"require_unmetered\":").append(requireUnmetered);
        b.append(",\"require_charging\":").append(requireCharging);
        if (maxDownloadBytes != null) {
            b.append(",\"max_download_bytes\":").append(maxDownloadBytes);
        }
        if (unmetered != null) {
            b.append(",\"unmetered\":").append(unmetered);
        }
        if (charging != null) {
            b.append(",\"charging\":").append(charging);
        }
        if (powerSaver != null) {
            b.append(",\"power_saver\":").append(powerSaver);
        }
        if (probe != null) {
            b.append(",\"probe\":{\"candidates\":").append(probe.candidates())
                    .append(",\"runs\":").append(probe.runs())
                    .append(",\"max_ms\":").append(probe.maxMillis()).append('}');
        }
        return b.append('}').toString();
    }

    @Override
    public String toString() {
        return toJson();
    }

    /**
     * The on-device probe: time the best {@code candidates} (the loaded one included) on their
     * signed golden inputs, up to {@code runs} runs each within {@code maxMillis}, once per
     * release; never in power-saving mode (see docs/client.md).
     */
    public record Probe(int candidates, int runs, long maxMillis) {
        /** The defaults: 2 candidates, 20 runs, 2 seconds. */
        public static final Probe DEFAULT = new Probe(2, 20, 2000);

        /** Checks the bounds the library enforces. */
        public Probe {
            if (candidates < 1 || candidates > 16 || runs < 1 || runs > 10_000
                    || maxMillis < 0 || maxMillis > 60_000) {
                throw new IllegalArgumentException(
                        "probe: candidates 1 to 16, runs 1 to 10,000, maxMillis 0 to 60,000");
            }
        }
    }

    /** Builds {@link LoadOptions}. */
    public static final class Builder {
        private LoadMode mode = LoadMode.LATEST;
        private boolean requireUnmetered;
        private boolean requireCharging;
        private Long maxDownloadBytes;
        private Boolean unmetered;
        private Boolean charging;
        private Boolean powerSaver;
        private Probe probe;

        private Builder() {}

        /** How the load uses the cache. */
        public Builder mode(LoadMode m) {
            this.mode = java.util.Objects.requireNonNull(m, "mode");
            return this;
        }

        /** Download only on an unmetered network. */
        public Builder requireUnmetered(boolean v) {
            this.requireUnmetered = v;
            return this;
        }

        /** Download only while charging. */
        public Builder requireCharging(boolean v) {
            this.requireCharging = v;
            return this;
        }

        /** The most bytes one load may fetch over all its downloads. */
        public Builder maxDownloadBytes(long v) {
            if (v < 0) {
                throw new IllegalArgumentException("maxDownloadBytes must not be negative");
            }
            this.maxDownloadBytes = v;
            return this;
        }

        /** Whether the network is unmetered now (null: unknown). */
        public Builder unmetered(Boolean v) {
            this.unmetered = v;
            return this;
        }

        /** Whether the device is charging now (null: unknown). */
        public Builder charging(Boolean v) {
            this.charging = v;
            return this;
        }

        /** Whether the device is in power-saving mode now (null: unknown). */
        public Builder powerSaver(Boolean v) {
            this.powerSaver = v;
            return this;
        }

        /** Turns the on-device probe on ({@code null}: off, the default). */
        public Builder probe(Probe p) {
            this.probe = p;
            return this;
        }

        /** The options. */
        public LoadOptions build() {
            return new LoadOptions(this);
        }
    }
}

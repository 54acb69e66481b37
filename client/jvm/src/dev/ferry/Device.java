package dev.ferry;

import java.util.List;
import java.util.Objects;

/**
 * The device a model is loaded for: what the server selects a variant by. Build one with
 * {@link #builder(String, String)}; it is immutable. {@link #toJson()} gives the JSON form the
 * string-taking methods accept.
 */
public final class Device {
    private final String installId;
    private final String platform;
    private final String osVersion;
    private final String deviceModel;
    private final String soc;
    private final long ramMb;
    private final List<String> claimedBackends;

    private Device(Builder b) {
        this.installId = b.installId;
        this.platform = b.platform;
        this.osVersion = b.osVersion;
        this.deviceModel = b.deviceModel;
        this.soc = b.soc;
        this.ramMb = b.ramMb;
        this.claimedBackends = List.copyOf(b.claimedBackends);
    }

    /**
     * A builder for the device with this install id (random per install, kept by the app; never
     * a hardware id) on {@code platform} ({@code "android"}, {@code "ios"}, {@code "linux"},
     * ...).
     */
    public static Builder builder(String installId, String platform) {
        return new Builder(installId, platform);
    }

    /** The install id. */
    public String installId() {
        return installId;
    }

    /** The platform. */
    public String platform() {
        return platform;
    }

    /** The OS version (dotted numbers, or empty). */
    public String osVersion() {
        return osVersion;
    }

    /** The device model (empty when unknown). */
    public String deviceModel() {
        return deviceModel;
    }

    /** The SoC (empty when unknown). */
    public String soc() {
        return soc;
    }

    /** RAM in MiB (0 when unknown). */
    public long ramMb() {
        return ramMb;
    }

    /** Backends claimed beyond those the runtime registers (usually none). */
    public List<String> claimedBackends() {
        return claimedBackends;
    }

    /** The JSON form ({@code install_id}, {@code platform}, ... as {@code ferry_load} takes). */
    public String toJson() {
        return "{\"install_id\":" + Json.str(installId)
                + ",\"platform\":" + Json.str(platform)
                + ",\"os_version\":" + Json.str(osVersion)
                + ",\"device_model\":" + Json.str(deviceModel)
                + ",\"soc\":" + Json.str(soc)
                + ",\"ram_mb\":" + ramMb
                + ",\"claimed_backends\":" + Json.strings(claimedBackends) + "}";
    }

    @Override
    public String toString() {
        return toJson();
    }

    /** Builds a {@link Device}. */
    public static final class Builder {
        private final String installId;
        private final String platform;
        private String osVersion = "";
        private String deviceModel = "";
        private String soc = "";
        private long ramMb;
        private List<String> claimedBackends = List.of();

        private Builder(String installId, String platform) {
            if (installId == null || installId.isEmpty()) {
                throw new IllegalArgumentException("installId must not be empty");
            }
            if (platform == null || platform.isEmpty()) {
                throw new IllegalArgumentException("platform must not be empty");
            }
            this.installId = installId;
            this.platform = platform;
        }

        /** The OS version, dotted numbers ({@code "14"}, {@code "17.4"}). */
        public Builder osVersion(String v) {
            this.osVersion = Objects.requireNonNull(v, "osVersion");
            return this;
        }

        /** The device model ({@code Build.MODEL} on Android). */
        public Builder deviceModel(String v) {
            this.deviceModel = Objects.requireNonNull(v, "deviceModel");
            return this;
        }

        /** The SoC ({@code Build.SOC_MODEL} on Android 12+). */
        public Builder soc(String v) {
            this.soc = Objects.requireNonNull(v, "soc");
            return this;
        }

        /** RAM in MiB. */
        public Builder ramMb(long v) {
            if (v < 0) {
                throw new IllegalArgumentException("ramMb must not be negative");
            }
            this.ramMb = v;
            return this;
        }

        /** Backends to claim beyond those the runtime registers. */
        public Builder claimedBackends(String... backends) {
            this.claimedBackends = List.of(backends);
            return this;
        }

        /** The device. */
        public Device build() {
            return new Device(this);
        }
    }
}

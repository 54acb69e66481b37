package dev.ferry;

/** How a load uses the cache and the server (see docs/client.md, download policy). */
public enum LoadMode {
    /** Ask the server and load what it offers now (the default). */
    LATEST("latest"),
    /** Load the cached last known good copy without asking the server when there is one. */
    CACHED_OR_DOWNLOAD("cached_or_download"),
    /** Load the cached copy now and fetch the latest in the background for the next load. */
    CACHED_THEN_UPDATE("cached_then_update");

    private final String wire;

    LoadMode(String wire) {
        this.wire = wire;
    }

    /** The name in the options JSON. */
    public String wire() {
        return wire;
    }
}

package dev.ferry;

/**
 * Download progress of a {@link FerryClient}'s loads: set with
 * {@link FerryClient#setProgressListener(ProgressListener)}. Called on the thread that
 * downloads (the load's), often: return quickly and hand the figures to the UI thread.
 */
@FunctionalInterface
public interface ProgressListener {
    /**
     * One step: {@code done} bytes of the variant's files (program, data files and assets,
     * one count over all) are on disk, of {@code total}.
     */
    void onProgress(String variant, long done, long total);
}

import dev.ferry.ErrorCode;
import dev.ferry.FerryClient;
import dev.ferry.FerryException;
import dev.ferry.FerryModel;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * One launch of a JVM app for the crash-safe loading test (tests/tests/e2e/bindings/jvm.rs):
 * loads a model through the binding and prints what happened. Its native crashes come from a
 * library the test preloads. Arguments: server, trust.json, cache folder, model, and
 * optionally "forget" (forget the recorded crashes first).
 */
public final class CrashLoad {
    public static void main(String[] args) throws Exception {
        String trust = Files.readString(Path.of(args[1]));
        String device = "{\"install_id\":\"jvm-crash\",\"platform\":\"linux\",\"os_version\":\"6.1\","
                + "\"soc\":\"RK3588\",\"device_model\":\"board\",\"ram_mb\":4096}";
        try (FerryClient client = new FerryClient(args[0], trust, args[2], "1.0.0")) {
            if (args.length > 4 && args[4].equals("forget")) {
                System.out.println("forgotten=" + client.forgetCrashes(null));
            }
            try (FerryModel model = client.load(args[3], device)) {
                System.out.println("variant=" + model.variant());
                System.out.println("report=" + model.reportJson());
            } catch (FerryException e) {
                System.out.println("error code=" + e.code() + " crashed="
                        + (e.errorCode() == ErrorCode.CRASHED));
            }
        }
    }
}

package changelake.endpoint;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Properties;

/**
 * The endpoint's users, read from the properties file changelake writes (mode 0600) and names in the system
 * property {@code changelake.endpoint.secrets}: {@code thrift.user.<name>.password} and
 * {@code thrift.user.<name>.role} ({@code owner} or {@code read}). Read again on every call, so a rotated
 * password applies to the next connection without a restart; a missing or unreadable file admits nobody.
 */
final class Secrets {
  private final Properties properties;

  private Secrets(Properties properties) {
    this.properties = properties;
  }

  static Secrets load() {
    Properties properties = new Properties();
    String location = System.getProperty("changelake.endpoint.secrets");
    if (location != null) {
      Path path = Paths.get(location);
      if (Files.isRegularFile(path, LinkOption.NOFOLLOW_LINKS)) {
        try (InputStream in = Files.newInputStream(path, LinkOption.NOFOLLOW_LINKS)) {
          properties.load(in);
        } catch (IOException e) {
          properties.clear();
        }
      }
    }
    return new Secrets(properties);
  }

  /** The user's password, or null for a user the file does not name. */
  String password(String user) {
    return user == null ? null : properties.getProperty("thrift.user." + user + ".password");
  }

  /** The user's role: "owner" only when the file says so; every other user (LDAP's too) reads. */
  String role(String user) {
    String role = user == null ? null : properties.getProperty("thrift.user." + user + ".role");
    return "owner".equals(role) ? "owner" : "read";
  }
}

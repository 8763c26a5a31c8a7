package changelake.endpoint;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import javax.security.sasl.AuthenticationException;
import org.apache.hive.service.auth.PasswdAuthenticationProvider;

/**
 * HiveServer2's CUSTOM authentication ({@code hive.server2.authentication=CUSTOM}) for the changelake SQL
 * endpoint: a Thrift client's user name and password (SASL PLAIN) must match a user of {@link Secrets}.
 * Passwords are compared as SHA-256 digests with {@link MessageDigest#isEqual} (constant time).
 */
public final class PasswordAuthenticator implements PasswdAuthenticationProvider {
  @Override
  public void Authenticate(String user, String password) throws AuthenticationException {
    String expected = Secrets.load().password(user);
    if (expected == null || password == null || !MessageDigest.isEqual(digest(expected), digest(password))) {
      throw new AuthenticationException("changelake SQL endpoint: wrong user name or password");
    }
  }

  private static byte[] digest(String value) throws AuthenticationException {
    try {
      return MessageDigest.getInstance("SHA-256").digest(value.getBytes(StandardCharsets.UTF_8));
    } catch (NoSuchAlgorithmException e) {
      throw new AuthenticationException("SHA-256 is not available", e);
    }
  }
}

package dev.leasehold;

import io.grpc.Attributes;
import io.grpc.EquivalentAddressGroup;
import io.grpc.NameResolver;
import io.grpc.NameResolverProvider;
import io.grpc.Status;
import io.grpc.StatusOr;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.net.URI;
import java.net.URISyntaxException;
import java.net.UnknownHostException;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.concurrent.Executor;

/**
 * grpc-java's name resolver for a list of servers: the target {@code leasehold:///a:1,b:2} (what
 * {@link LeaseholdClient#connect} makes of {@code "a:1,b:2"}) resolves to every address of every
 * host of the list, in the list's order, and the channel's {@code pick_first} policy uses the
 * first that answers, moving on down the list when it fails. A host that is a DNS name adds all of
 * its addresses; each is re-resolved whenever the channel asks (after a connection fails).
 * Every address carries its own {@code host:port} as its authority, so TLS checks each server's
 * certificate against the name it was given by.
 */
final class AddressListNameResolverProvider extends NameResolverProvider {
  static final String SCHEME = "leasehold";

  /** The grpc target for a comma-separated list of {@code host:port} entries. */
  static String target(List<HostPort> servers) {
    StringBuilder path = new StringBuilder("/");
    for (HostPort server : servers) {
      if (path.length() > 1) {
        path.append(',');
      }
      path.append(server);
    }
    try {
      // Quotes what a URI path may not hold (an IPv6 literal's brackets).
      return new URI(SCHEME, "", path.toString(), null, null).toString();
    } catch (URISyntaxException e) {
      throw new IllegalArgumentException("cannot make a target of " + servers, e);
    }
  }

  /** One server of a list as the user wrote it. */
  record HostPort(String host, int port) {
    /** Parses {@code host:port} or {@code [v6]:port}. */
    static HostPort parse(String entry) {
      String text = entry.trim();
      int colon = text.lastIndexOf(':');
      if (colon <= 0 || colon == text.length() - 1) {
        throw new IllegalArgumentException("server address needs host:port, got \"" + entry + "\"");
      }
      String host = text.substring(0, colon);
      if (host.startsWith("[") && host.endsWith("]")) {
        host = host.substring(1, host.length() - 1);
      } else if (host.contains(":")) {
        throw new IllegalArgumentException(
            "an IPv6 server address needs brackets ([::1]:50051), got \"" + entry + "\"");
      }
      int port;
      try {
        port = Integer.parseInt(text.substring(colon + 1));
      } catch (NumberFormatException e) {
        throw new IllegalArgumentException("bad port in server address \"" + entry + "\"");
      }
      if (port < 1 || port > 65535) {
        throw new IllegalArgumentException("bad port in server address \"" + entry + "\"");
      }
      return new HostPort(host, port);
    }

    /** Parses a comma-separated list (empty entries are skipped). */
    static List<HostPort> parseList(String list) {
      List<HostPort> servers = new ArrayList<>();
      for (String entry : list.split(",")) {
        if (!entry.isBlank()) {
          servers.add(parse(entry));
        }
      }
      if (servers.isEmpty()) {
        throw new IllegalArgumentException("no server address in \"" + list + "\"");
      }
      return servers;
    }

    @Override
    public String toString() {
      return (host.contains(":") ? "[" + host + "]" : host) + ":" + port;
    }
  }

  @Override
  protected boolean isAvailable() {
    return true;
  }

  @Override
  protected int priority() {
    return 5;
  }

  @Override
  public String getDefaultScheme() {
    return SCHEME;
  }

  @Override
  public Collection<Class<? extends SocketAddress>> getProducedSocketAddressTypes() {
    return List.of(InetSocketAddress.class);
  }

  @Override
  public NameResolver newNameResolver(URI targetUri, NameResolver.Args args) {
    if (!SCHEME.equals(targetUri.getScheme())) {
      return null;
    }
    String path = targetUri.getPath() == null ? "" : targetUri.getPath();
    return new Resolver(HostPort.parseList(path.startsWith("/") ? path.substring(1) : path), args);
  }

  private static final class Resolver extends NameResolver {
    private final List<HostPort> servers;
    private final Args args;
    private Listener2 listener;
    private boolean resolving;
    private boolean shutdown;

    Resolver(List<HostPort> servers, Args args) {
      this.servers = servers;
      this.args = args;
    }

    @Override
    public String getServiceAuthority() {
      return servers.get(0).toString();
    }

    @Override
    public void start(Listener2 listener) {
      this.listener = listener;
      resolve();
    }

    @Override
    public void refresh() {
      resolve();
    }

    /** Called in the channel's synchronization context (start, refresh). */
    private void resolve() {
      if (resolving || shutdown) {
        return;
      }
      resolving = true;
      Executor executor = args.getOffloadExecutor();
      Runnable lookUp = () -> {
        List<EquivalentAddressGroup> groups = new ArrayList<>();
        List<String> failures = new ArrayList<>();
        for (HostPort server : servers) {
          try {
            for (InetAddress address : InetAddress.getAllByName(server.host())) {
              groups.add(new EquivalentAddressGroup(
                  new InetSocketAddress(address, server.port()),
                  Attributes.newBuilder()
                      .set(EquivalentAddressGroup.ATTR_AUTHORITY_OVERRIDE, server.toString())
                      .build()));
            }
          } catch (UnknownHostException e) {
            failures.add(server + ": " + e.getMessage());
          }
        }
        args.getSynchronizationContext().execute(() -> {
          resolving = false;
          if (shutdown) {
            return;
          }
          StatusOr<List<EquivalentAddressGroup>> addresses = groups.isEmpty()
              ? StatusOr.fromStatus(Status.UNAVAILABLE.withDescription(
                  "no address for any server: " + String.join("; ", failures)))
              : StatusOr.fromValue(groups);
          listener.onResult2(ResolutionResult.newBuilder().setAddressesOrError(addresses).build());
        });
      };
      if (executor != null) {
        executor.execute(lookUp);
      } else {
        Thread thread = new Thread(lookUp, "leasehold-resolver");
        thread.setDaemon(true);
        thread.start();
      }
    }

    @Override
    public void shutdown() {
      shutdown = true;
    }
  }
}

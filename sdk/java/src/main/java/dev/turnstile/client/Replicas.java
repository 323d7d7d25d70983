package dev.turnstile.client;

import io.grpc.EquivalentAddressGroup;
import io.grpc.NameResolver;
import io.grpc.NameResolverProvider;
import io.grpc.NameResolverRegistry;
import java.net.InetSocketAddress;
import java.net.URI;
import java.util.ArrayList;
import java.util.List;

/**
 * Several replicas named by address ({@code http://10.0.0.1:50051,10.0.0.2:50051}): a name
 * resolver that hands the channel every address, tried in turn (pick_first moves on when
 * one stops answering).
 */
final class Replicas extends NameResolverProvider {
  private static final String SCHEME = "turnstile-replicas";
  private static final Object REGISTERED = register();

  private static Object register() {
    NameResolverRegistry.getDefaultRegistry().register(new Replicas());
    return new Object();
  }

  /** The channel target of these {@code host:port}s. */
  static String target(List<String> hosts) {
    for (String host : hosts) {
      int colon = host.lastIndexOf(':');
      String name = colon < 0 ? host : host.substring(0, colon).replaceAll("^\\[|\\]$", "");
      if (colon < 0 || !(name.matches("[0-9.]+") || name.contains(":"))) {
        throw new InvalidArgumentException("server: \"" + host + "\": a list of replicas takes IP addresses with ports");
      }
    }
    if (REGISTERED == null) {
      throw new IllegalStateException("the replicas' resolver is not registered");
    }
    return SCHEME + ":///" + String.join(",", hosts);
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
  public NameResolver newNameResolver(URI target, NameResolver.Args args) {
    if (!SCHEME.equals(target.getScheme())) {
      return null;
    }
    List<EquivalentAddressGroup> addresses = new ArrayList<>();
    for (String host : target.getPath().substring(1).split(",")) {
      int colon = host.lastIndexOf(':');
      String name = host.substring(0, colon).replaceAll("^\\[|\\]$", "");
      addresses.add(new EquivalentAddressGroup(
          new InetSocketAddress(name, Integer.parseInt(host.substring(colon + 1)))));
    }
    return new NameResolver() {
      @Override
      public String getServiceAuthority() {
        return target.getPath().substring(1).split(",")[0];
      }

      @Override
      public void start(Listener2 listener) {
        listener.onResult(ResolutionResult.newBuilder().setAddresses(addresses).build());
      }

      @Override
      public void shutdown() {}
    };
  }
}

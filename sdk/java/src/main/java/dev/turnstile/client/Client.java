package dev.turnstile.client;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ChannelCredentials;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.TlsChannelCredentials;
import java.io.File;
import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import turnstile.v1.LockServiceGrpc;
import turnstile.v1.QueueServiceGrpc;
import turnstile.v1.ScheduleServiceGrpc;
import turnstile.v1.SemaphoreServiceGrpc;

/**
 * One gRPC channel to turnstile: locks and leader election held through {@code Hold}
 * streams, semaphores, queues with a worker, and schedules. Thread-safe; close it when
 * done (leases still held end with it).
 *
 * <p>Calls that meet {@code UNAVAILABLE} (a replica restarting, a proxy's GOAWAY) are
 * retried with jittered exponential backoff (100 ms doubling to 5 s) for at most 30 s,
 * and each retry is safe: the library fills the ids of enqueued tasks the caller left
 * empty. The generated stubs ({@code turnstile.v1}) are reachable through {@link
 * #locks()} and the other stub accessors for anything the library does not wrap.
 */
public final class Client implements AutoCloseable {
  /** The server used when neither the builder nor {@code TURNSTILE_SERVER} names one. */
  public static final String DEFAULT_SERVER = "http://127.0.0.1:50051";

  private final ManagedChannel channel;
  final Rpc rpc;

  private Client(ManagedChannel channel) {
    this.channel = channel;
    this.rpc = new Rpc(channel);
  }

  /** A client configured by the environment: TURNSTILE_SERVER, TURNSTILE_TOKEN, TURNSTILE_CA_CERT. */
  public static Client create() {
    return builder().build();
  }

  /** A client of {@code server} ({@code http://host:port} or {@code https://host:port}). */
  public static Client create(String server) {
    return builder().server(server).build();
  }

  public static Builder builder() {
    return new Builder();
  }

  /** Settings of a client; unset ones take the environment's defaults. */
  public static final class Builder {
    private String server;
    private String token;
    private String caCert;

    /**
     * {@code http://host:port} or {@code https://host:port}; several replicas as {@code
     * http://10.0.0.1:50051,10.0.0.2:50051} (IP addresses), tried in turn.
     */
    public Builder server(String server) {
      this.server = server;
      return this;
    }

    /** The bearer token sent with every call. */
    public Builder token(String token) {
      this.token = token;
      return this;
    }

    /** A PEM file of the CA to trust for https (default: the system's). */
    public Builder caCert(String caCert) {
      this.caCert = caCert;
      return this;
    }

    public Client build() {
      String server = firstOf(this.server, System.getenv("TURNSTILE_SERVER"), DEFAULT_SERVER);
      String token = firstOf(this.token, System.getenv("TURNSTILE_TOKEN"), "");
      String caCert = firstOf(this.caCert, System.getenv("TURNSTILE_CA_CERT"), "");
      String[] schemeAndRest = server.contains("://") ? server.split("://", 2) : new String[] {"http", server};
      String scheme = schemeAndRest[0];
      if (!scheme.equals("http") && !scheme.equals("https")) {
        throw new InvalidArgumentException("server: \"" + server + "\" must start with http:// or https://");
      }
      List<String> hosts = new ArrayList<>();
      for (String host : schemeAndRest[1].replaceAll("/+$", "").split(",")) {
        if (!host.isBlank()) {
          hosts.add(host.trim());
        }
      }
      if (hosts.isEmpty()) {
        throw new InvalidArgumentException("server: \"" + server + "\" names no host");
      }
      ChannelCredentials credentials = InsecureChannelCredentials.create();
      if (scheme.equals("https")) {
        TlsChannelCredentials.Builder tls = TlsChannelCredentials.newBuilder();
        if (!caCert.isEmpty()) {
          try {
            tls.trustManager(new File(caCert));
          } catch (IOException err) {
            throw new InvalidArgumentException("ca_cert: " + err.getMessage());
          }
        }
        credentials = tls.build();
      }
      String target = hosts.size() == 1 ? hosts.get(0) : Replicas.target(hosts);
      ManagedChannelBuilder<?> builder = Grpc.newChannelBuilder(target, credentials)
          .maxInboundMessageSize(8 << 20);
      if (hosts.size() > 1) {
        builder.overrideAuthority(hosts.get(0));
      }
      if (!token.isEmpty()) {
        builder.intercept(new Bearer(token));
      }
      return new Client(builder.build());
    }
  }

  private static String firstOf(String... values) {
    for (String value : values) {
      if (value != null && !value.isEmpty()) {
        return value;
      }
    }
    return "";
  }

  /** Sends the token with every call. */
  private static final class Bearer implements ClientInterceptor {
    private static final Metadata.Key<String> AUTHORIZATION =
        Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);
    private final String header;

    Bearer(String token) {
      this.header = "Bearer " + token;
    }

    @Override
    public <Q, R> ClientCall<Q, R> interceptCall(MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
      return new ForwardingClientCall.SimpleForwardingClientCall<>(next.newCall(method, options)) {
        @Override
        public void start(Listener<R> listener, Metadata headers) {
          headers.put(AUTHORIZATION, header);
          super.start(listener, headers);
        }
      };
    }
  }

  /** The generated lock stub on this client's channel. */
  public LockServiceGrpc.LockServiceBlockingStub locks() {
    return rpc.locks;
  }

  /** The generated queue stub on this client's channel. */
  public QueueServiceGrpc.QueueServiceBlockingStub queues() {
    return rpc.queues;
  }

  /** The generated schedule stub on this client's channel. */
  public ScheduleServiceGrpc.ScheduleServiceBlockingStub scheduleStub() {
    return rpc.schedules;
  }

  /** The generated semaphore stub on this client's channel. */
  public SemaphoreServiceGrpc.SemaphoreServiceBlockingStub semaphores() {
    return rpc.semaphores;
  }

  /**
   * Takes the lock {@code name} for {@code ttl}, held (renewed) until {@link
   * Lease#close()}; waits without end.
   */
  public Lease lock(String name, Duration ttl) {
    return lock(name, ttl, LeaseOptions.defaults());
  }

  /** {@link #lock(String, Duration)} with a wait bound, an owner. */
  public Lease lock(String name, Duration ttl, LeaseOptions options) {
    return Lease.acquire(rpc, Lease.Kind.lock(rpc, name, ttl, options), options.waitOrNull());
  }

  /** One attempt: the lease, or null when another holds the lock. */
  public Lease tryLock(String name, Duration ttl) {
    return tryLock(name, ttl, LeaseOptions.defaults());
  }

  /** {@link #tryLock(String, Duration)} as {@code owner}. */
  public Lease tryLock(String name, Duration ttl, LeaseOptions options) {
    try {
      return Lease.acquire(rpc, Lease.Kind.lock(rpc, name, ttl, options), Duration.ZERO);
    } catch (NotAcquiredException notAcquired) {
      return null;
    }
  }

  /** Waits, without end, to lead {@code name} as {@code owner}: the lease is the leadership. */
  public Lease campaign(String name, String owner, Duration ttl) {
    return lock(name, ttl, LeaseOptions.defaults().owner(owner));
  }

  /**
   * Takes {@code options.permits()} (default 1) of the semaphore {@code name} whose limit is
   * {@code limit}, first come first served; held and waited for as {@link #lock} is.
   */
  public Permit semaphore(String name, int limit, Duration ttl, LeaseOptions options) {
    return (Permit) Lease.acquire(rpc, Lease.Kind.semaphore(rpc, name, limit, ttl, options), options.waitOrNull());
  }

  /** A semaphore permit, waiting without end. */
  public Permit semaphore(String name, int limit, Duration ttl) {
    return semaphore(name, limit, ttl, LeaseOptions.defaults());
  }

  /** Whether {@code fencingToken} is the lock's current one ({@code CheckFence}). */
  public boolean checkFence(String name, long fencingToken) {
    return rpc.call(stub -> stub.locks.checkFence(
        turnstile.v1.Lock.CheckFenceRequest.newBuilder().setName(name).setFencingToken(fencingToken).build()))
        .getCurrent();
  }

  /**
   * The lock's state now, then each change, as a blocking iterator; re-opened after
   * {@code UNAVAILABLE}; a state older than one already seen is skipped. Close it to stop.
   */
  public LockWatch watch(String name) {
    return new LockWatch(rpc, name);
  }

  /** A queue of the client's tenant (nothing is sent). */
  public Queue queue(String name) {
    return new Queue(rpc, name);
  }

  /** A worker of {@code handler} on {@code queue}; {@link Worker#run()} starts it. */
  public Worker worker(String queue, Handler handler, WorkerOptions options) {
    return new Worker(rpc, queue, handler, options);
  }

  /** A worker with the default options (concurrency 1). */
  public Worker worker(String queue, Handler handler) {
    return worker(queue, handler, WorkerOptions.defaults());
  }

  /** The tenant's schedules. */
  public Schedules schedules() {
    return new Schedules(rpc);
  }

  /** Closes the channel; leases still held end with it. */
  @Override
  public void close() {
    channel.shutdownNow();
    try {
      channel.awaitTermination(5, TimeUnit.SECONDS);
    } catch (InterruptedException err) {
      Thread.currentThread().interrupt();
    }
  }
}

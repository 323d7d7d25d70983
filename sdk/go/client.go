// Package turnstile is the Go client of turnstile: locks and leader election held
// through Hold streams, semaphores, queues with a worker, and schedules, over the
// generated stubs of proto/turnstile/v1 (package pb/turnstile/v1, reachable through
// Client.Raw for anything this package does not wrap).
//
// Every call takes a context.Context. Calls that meet UNAVAILABLE (a replica
// restarting, a proxy's GOAWAY) are retried with jittered exponential backoff (100 ms
// doubling to 5 s) for as long as the context allows (30 s when it has no deadline),
// and each retry is safe: the library fills the ids of enqueued tasks the caller left
// empty, so a retry never enqueues a task twice.
package turnstile

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	pb "turnstile.dev/turnstile-go/pb/turnstile/v1"
)

// DefaultServer is the address used when neither Options.Server nor
// TURNSTILE_SERVER names one.
const DefaultServer = "http://127.0.0.1:50051"

// Options say where the server is and how to reach it. Empty fields take the
// environment's defaults: TURNSTILE_SERVER, TURNSTILE_TOKEN, TURNSTILE_CA_CERT.
type Options struct {
	// Server is http://host:port or https://host:port; several replicas as
	// http://10.0.0.1:50051,10.0.0.2:50051 (IP addresses), tried in turn.
	Server string
	// Token is the bearer token sent with every call.
	Token string
	// CACert is a PEM file of the CA to trust for https (default: the system's).
	CACert string
}

// Raw holds the generated stubs on the client's connection, for the RPCs this
// package does not wrap.
type Raw struct {
	Locks      pb.LockServiceClient
	Queues     pb.QueueServiceClient
	Schedules  pb.ScheduleServiceClient
	Semaphores pb.SemaphoreServiceClient
}

// Client is one gRPC connection to turnstile. It is safe for concurrent use; Close
// it when done.
type Client struct {
	// Raw is the generated stubs on this client's connection.
	Raw  Raw
	conn *grpc.ClientConn
}

// New connects lazily (the first call dials) to the server the options or the
// environment name.
func New(opts Options) (*Client, error) {
	server := firstOf(opts.Server, os.Getenv("TURNSTILE_SERVER"), DefaultServer)
	token := firstOf(opts.Token, os.Getenv("TURNSTILE_TOKEN"))
	caCert := firstOf(opts.CACert, os.Getenv("TURNSTILE_CA_CERT"))
	target, hosts, secure, err := parseServer(server)
	if err != nil {
		return nil, err
	}
	dial := []grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8 << 20)),
	}
	if secure {
		config := &tls.Config{MinVersion: tls.VersionTLS12}
		if caCert != "" {
			pem, err := os.ReadFile(caCert)
			if err != nil {
				return nil, invalid("ca_cert: %v", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, invalid("ca_cert: %s holds no PEM certificate", caCert)
			}
			config.RootCAs = pool
		}
		dial = append(dial, grpc.WithTransportCredentials(credentials.NewTLS(config)))
	} else {
		dial = append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if token != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(bearer{token: token}))
	}
	if len(hosts) > 1 {
		// Several replicas: a resolver of their addresses, tried in turn (pick_first
		// moves to the next when one stops answering).
		replicas := manual.NewBuilderWithScheme("turnstile")
		addresses := make([]resolver.Address, len(hosts))
		for i, host := range hosts {
			addresses[i] = resolver.Address{Addr: host}
		}
		replicas.InitialState(resolver.State{Addresses: addresses})
		dial = append(dial, grpc.WithResolvers(replicas), grpc.WithAuthority(hosts[0]))
		target = "turnstile:///replicas"
	}
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, invalid("server: %v", err)
	}
	return &Client{
		conn: conn,
		Raw: Raw{
			Locks:      pb.NewLockServiceClient(conn),
			Queues:     pb.NewQueueServiceClient(conn),
			Schedules:  pb.NewScheduleServiceClient(conn),
			Semaphores: pb.NewSemaphoreServiceClient(conn),
		},
	}, nil
}

// Close closes the connection; leases still held end with it (the server frees
// them when it sees their streams close).
func (c *Client) Close() error {
	return c.conn.Close()
}

func firstOf(values ...string) string {
	for _, value := range values {
		if value != "" {
			return value
		}
	}
	return ""
}

// parseServer reads http://host:port[,host:port...] into a gRPC target, its hosts
// and whether it is TLS.
func parseServer(server string) (target string, hosts []string, secure bool, err error) {
	scheme, rest, found := strings.Cut(server, "://")
	if !found {
		scheme, rest = "http", server
	}
	if scheme != "http" && scheme != "https" {
		return "", nil, false, invalid("server: %q must start with http:// or https://", server)
	}
	for _, host := range strings.Split(strings.TrimRight(rest, "/"), ",") {
		if host = strings.TrimSpace(host); host != "" {
			hosts = append(hosts, host)
		}
	}
	if len(hosts) == 0 {
		return "", nil, false, invalid("server: %q names no host", server)
	}
	if len(hosts) > 1 {
		for _, host := range hosts {
			name, _, splitErr := net.SplitHostPort(host)
			if splitErr != nil || net.ParseIP(name) == nil {
				return "", nil, false, invalid("server: %q: a list of replicas takes IP addresses with ports", host)
			}
		}
	}
	return "passthrough:///" + hosts[0], hosts, scheme == "https", nil
}

// bearer sends the token with every call.
type bearer struct {
	token string
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity is false: a token over plain http is the server's choice
// to allow (it does on loopback and behind a TLS-terminating proxy).
func (b bearer) RequireTransportSecurity() bool {
	return false
}

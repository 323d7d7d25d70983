// The Go library's benchmark (SDK.md's; ratios in one run, never a timed test):
//
//	go run . [-tasks 20000] [-rounds 2] [-concurrency 8] [-lock-duration 10s] [-goroutines 64]
//
// It starts its own redis-server and `turnstile serve` (TURNSTILE_BIN, else the
// repository's target/release/turnstile) and, when Debian's etcd is installed, an etcd.
// Each round enqueues the tasks and drains them with a no-op handler: the raw loop (one
// Subscribe with max_in_flight = concurrency, an Ack per task sent as soon as it
// arrives) and the library's Worker; it prints tasks/s of each and the library / raw
// ratio (goal ≥ 0.9). Then lock cycles: the library's Lock + Release against etcd's
// concurrency.Mutex Lock + Unlock (a session, so one lease, per goroutine), the same
// number of goroutines on one name for the same time.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	turnstile "turnstile.dev/turnstile-go"
	pb "turnstile.dev/turnstile-go/pb/turnstile/v1"
)

func main() {
	tasks := flag.Int("tasks", 20000, "tasks per round")
	rounds := flag.Int("rounds", 2, "rounds of each worker")
	concurrency := flag.Int("concurrency", 8, "handlers at once (max_in_flight)")
	lockFor := flag.Duration("lock-duration", 10*time.Second, "how long each lock contender runs")
	goroutines := flag.Int("goroutines", 64, "lock contenders")
	flag.Parse()

	dir, err := os.MkdirTemp("", "turnstile-go-bench-")
	must(err)
	defer os.RemoveAll(dir)
	redisPort, serverPort := freePort(), freePort()
	redis := start(exec.Command("redis-server", "--port", fmt.Sprint(redisPort), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir), "")
	defer kill(redis)
	waitPort(redisPort)
	bin := os.Getenv("TURNSTILE_BIN")
	if bin == "" {
		bin, _ = filepath.Abs("../../../target/release/turnstile")
	}
	server := start(exec.Command(bin, "serve", "--listen", fmt.Sprintf("127.0.0.1:%d", serverPort),
		"--metrics-listen", "127.0.0.1:0", "--dashboard-listen", "off",
		"--redis-url", fmt.Sprintf("redis://127.0.0.1:%d", redisPort), "--log-format", "json"), `"ready"`)
	defer kill(server)
	url := fmt.Sprintf("http://127.0.0.1:%d", serverPort)
	client, err := turnstile.New(turnstile.Options{Server: url})
	must(err)
	defer client.Close()

	var raw, library []float64
	for round := 1; round <= *rounds; round++ {
		queue := fmt.Sprintf("bench-raw-%d", round)
		fill(client, queue, *tasks)
		raw = append(raw, rawLoop(serverPort, queue, *tasks, *concurrency))
		queue = fmt.Sprintf("bench-lib-%d", round)
		fill(client, queue, *tasks)
		library = append(library, worker(client, queue, *tasks, *concurrency))
		fmt.Printf("round %d: raw loop %.0f tasks/s, Worker %.0f tasks/s\n", round, raw[round-1], library[round-1])
	}
	fmt.Printf("worker: raw %.0f tasks/s, library %.0f tasks/s, ratio %.2f (goal >= 0.9)\n",
		best(raw), best(library), best(library)/best(raw))

	cycles := lockCycles(client, *goroutines, *lockFor)
	fmt.Printf("lock: turnstile Lock+Release %.0f cycles/s (%d goroutines)\n", cycles, *goroutines)
	if etcdBin, err := exec.LookPath("etcd"); err == nil {
		etcdCycles := etcdMutexCycles(etcdBin, dir, *goroutines, *lockFor)
		fmt.Printf("lock: etcd concurrency.Mutex %.0f cycles/s; turnstile / etcd %.2f\n", etcdCycles, cycles/etcdCycles)
	} else {
		fmt.Println("lock: etcd is not installed (apt install etcd-server): no comparison")
	}
}

func best(figures []float64) float64 {
	top := 0.0
	for _, f := range figures {
		top = max(top, f)
	}
	return top
}

func fill(client *turnstile.Client, queue string, tasks int) {
	q := client.Queue(queue)
	for start := 0; start < tasks; start += 1000 {
		batch := make([]turnstile.NewTask, min(1000, tasks-start))
		for i := range batch {
			batch[i] = turnstile.NewTask{Payload: []byte("x")}
		}
		_, err := q.EnqueueMany(context.Background(), batch)
		must(err)
	}
}

// rawLoop drains queue with one Subscribe and an Ack per task on the raw stubs.
func rawLoop(port int, queue string, tasks, concurrency int) float64 {
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", port), grpc.WithTransportCredentials(insecure.NewCredentials()))
	must(err)
	defer conn.Close()
	queues := pb.NewQueueServiceClient(conn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var acked atomic.Int64
	done := make(chan struct{})
	started := time.Now()
	stream, err := queues.Subscribe(ctx, &pb.SubscribeRequest{Queue: queue, MaxInFlight: uint32(concurrency)})
	must(err)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			if task := m.GetTask(); task != nil {
				go func() {
					_, err := queues.Ack(ctx, &pb.AckRequest{Queue: queue, Receipts: []string{task.Receipt}})
					if err == nil && acked.Add(1) == int64(tasks) {
						close(done)
					}
				}()
			}
		}
	}()
	<-done
	return float64(tasks) / time.Since(started).Seconds()
}

// worker drains queue with the library's Worker and a no-op handler; done when every
// task is handled and the queue holds nothing.
func worker(client *turnstile.Client, queue string, tasks, concurrency int) float64 {
	var handled atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	w := client.Worker(queue, func(context.Context, *turnstile.Task) error {
		handled.Add(1)
		return nil
	}, turnstile.WorkerOptions{Concurrency: concurrency})
	finished := make(chan error, 1)
	started := time.Now()
	go func() { finished <- w.Run(ctx) }()
	q := client.Queue(queue)
	for {
		if handled.Load() >= int64(tasks) {
			if stats, err := q.Stats(context.Background()); err == nil && stats.InFlight+stats.Ready == 0 {
				break
			}
		}
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(started)
	cancel()
	must(<-finished)
	return float64(tasks) / elapsed.Seconds()
}

// lockCycles runs goroutines contenders of one lock name for d: Lock, then Release.
func lockCycles(client *turnstile.Client, goroutines int, d time.Duration) float64 {
	var cycles atomic.Int64
	end := time.Now().Add(d)
	var group sync.WaitGroup
	for range goroutines {
		group.Go(func() {
			for time.Now().Before(end) {
				lease, err := client.Lock(context.Background(), "bench-lock", 10*time.Second)
				must(err)
				_, err = lease.Release(context.Background())
				must(err)
				cycles.Add(1)
			}
		})
	}
	group.Wait()
	return float64(cycles.Load()) / d.Seconds()
}

// etcdMutexCycles starts an etcd and runs the same contention through
// concurrency.Mutex, one session (lease) per goroutine.
func etcdMutexCycles(bin, dir string, goroutines int, d time.Duration) float64 {
	clientPort, peerPort := freePort(), freePort()
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	etcd := start(exec.Command(bin, "--data-dir", filepath.Join(dir, "etcd"), "--name", "bench",
		"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "bench="+peerURL), "")
	defer kill(etcd)
	waitPort(clientPort)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{clientURL}, DialTimeout: 5 * time.Second})
	must(err)
	defer cli.Close()
	var cycles atomic.Int64
	end := time.Now().Add(d)
	var group sync.WaitGroup
	for range goroutines {
		group.Go(func() {
			session, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
			must(err)
			defer session.Close()
			mutex := concurrency.NewMutex(session, "/bench-lock")
			for time.Now().Before(end) {
				must(mutex.Lock(context.Background()))
				must(mutex.Unlock(context.Background()))
				cycles.Add(1)
			}
		})
	}
	group.Wait()
	return float64(cycles.Load()) / d.Seconds()
}

func freePort() int {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	must(err)
	defer listener.Close()
	return listener.Addr().(*net.TCPAddr).Port
}

// start runs cmd; with ready, until a line of its stderr contains it.
func start(cmd *exec.Cmd, ready string) *exec.Cmd {
	stderr, err := cmd.StderrPipe()
	must(err)
	must(cmd.Start())
	seen := make(chan struct{})
	go func() {
		lines := bufio.NewScanner(stderr)
		once := sync.Once{}
		for lines.Scan() {
			if ready != "" && strings.Contains(lines.Text(), ready) {
				once.Do(func() { close(seen) })
			}
		}
	}()
	if ready != "" {
		select {
		case <-seen:
		case <-time.After(30 * time.Second):
			must(fmt.Errorf("%s did not log %s", cmd.Path, ready))
		}
	}
	return cmd
}

func waitPort(port int) {
	for range 1000 {
		if conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			conn.Close()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	must(fmt.Errorf("nothing listens on %d", port))
}

func kill(cmd *exec.Cmd) {
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

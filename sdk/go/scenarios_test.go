package turnstile_test

// The twelve scenarios of SDK.md (and the task outcomes), against a real `turnstile
// serve` and redis-server.

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	turnstile "turnstile.dev/turnstile-go"
)

func newClient(t *testing.T, opts turnstile.Options) *turnstile.Client {
	t.Helper()
	client, err := turnstile.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// runWorker runs w until the test ends it with the returned stop (which waits for
// the drain).
func runWorker(t *testing.T, w *turnstile.Worker) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				check(t, err)
			case <-time.After(30 * time.Second):
				t.Errorf("the worker did not drain within 30 s")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func TestScenario01LockSectionsNeverOverlapAndFencingTokensIncrease(t *testing.T) {
	server := startServer(t, startRedis(t))
	client := newClient(t, turnstile.Options{Server: server.url()})
	ctx := context.Background()
	var inside, most atomic.Int32
	var mu sync.Mutex
	var fences []uint64
	var group sync.WaitGroup
	for range 8 {
		group.Go(func() {
			for range 200 {
				lease, err := client.Lock(ctx, "counter", 10*time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				now := inside.Add(1)
				for most.Load() < now && !most.CompareAndSwap(most.Load(), now) {
				}
				mu.Lock()
				fences = append(fences, lease.FencingToken)
				mu.Unlock()
				inside.Add(-1)
				if _, err := lease.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	group.Wait()
	if most.Load() != 1 {
		t.Fatalf("%d holders inside at once", most.Load())
	}
	if len(fences) != 1600 || !slices.IsSorted(fences) || len(slices.Compact(slices.Clone(fences))) != 1600 {
		t.Fatalf("fencing tokens do not strictly increase in the order the lock was won")
	}
}

func TestScenario02ALeaseWhoseRedisStopsPastItsTTLIsLostAndItsContextEnds(t *testing.T) {
	redis := startRedis(t)
	server := startServer(t, redis)
	client := newClient(t, turnstile.Options{Server: server.url()})
	lease, err := client.Lock(context.Background(), "doomed", 2*time.Second)
	check(t, err)
	redis.stop()
	stopped := time.Now()
	select {
	case <-lease.Lost():
	case <-time.After(2*time.Second + 3*time.Second):
		t.Fatal("not lost within TTL + 3 s")
	}
	if waited := time.Since(stopped); waited > 4*time.Second {
		t.Fatalf("lost after %s, more than TTL + 2 s", waited)
	}
	<-lease.Context().Done()
	if !errors.Is(context.Cause(lease.Context()), turnstile.ErrLeaseLost) || !errors.Is(lease.Check(), turnstile.ErrLeaseLost) {
		t.Fatalf("the cause is %v", context.Cause(lease.Context()))
	}
	redis.start()
}

func TestScenario03ALeaseSurvivesARestartOfItsReplica(t *testing.T) {
	redis := startRedis(t)
	a, b := startServer(t, redis), startServer(t, redis)
	client := newClient(t, turnstile.Options{Server: "http://" + a.addr() + "," + b.addr()})
	ctx := context.Background()
	lease, err := client.Lock(ctx, "kept", 3*time.Second)
	check(t, err)
	a.restart()
	b.restart()
	// Two TTLs after the restarts the lease is still held under the same fencing
	// token: the stream re-attached in time, each time.
	select {
	case <-lease.Lost():
		t.Fatalf("lost: %v", lease.Check())
	case <-time.After(6 * time.Second):
	}
	current, err := client.CheckFence(ctx, "kept", lease.FencingToken)
	check(t, err)
	freed, err := lease.Release(ctx)
	check(t, err)
	if !current || !freed || lease.Check() != nil {
		t.Fatalf("current %v, released %v, lost %v", current, freed, lease.Check())
	}
}

func TestScenario04AKilledLeaderIsFollowedWithinTTLAndWatchersSeeBoth(t *testing.T) {
	server := startServer(t, startRedis(t))
	client := newClient(t, turnstile.Options{Server: server.url()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var seen []turnstile.LockState
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		leaders := 0
		for state, err := range client.Watch(ctx, "leader") {
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			seen = append(seen, state)
			mu.Unlock()
			if state.Held {
				if leaders++; leaders == 2 {
					return
				}
			}
		}
	}()
	leading := func(cmd *exec.Cmd) *bufio.Reader {
		out, err := cmd.StdoutPipe()
		check(t, err)
		check(t, cmd.Start())
		return bufio.NewReader(out)
	}
	first := spawn(t, server, "candidate", map[string]string{"NAME": "leader", "OWNER": "node-a", "TTL": "2s"})
	firstOut := leading(first)
	line, err := firstOut.ReadString('\n')
	check(t, err)
	if !strings.HasPrefix(line, "leading") {
		t.Fatalf("node-a said %q", line)
	}
	second := spawn(t, server, "candidate", map[string]string{"NAME": "leader", "OWNER": "node-b", "TTL": "2s"})
	secondOut := leading(second)
	eventually(t, "the watcher sees node-a lead", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.ContainsFunc(seen, func(s turnstile.LockState) bool { return s.Owner == "node-a" })
	})
	check(t, first.Process.Kill())
	_ = first.Wait()
	killed := time.Now()
	line, err = secondOut.ReadString('\n')
	check(t, err)
	if !strings.HasPrefix(line, "leading") || time.Since(killed) > 4*time.Second {
		t.Fatalf("node-b said %q %s after the kill", line, time.Since(killed))
	}
	select {
	case <-watched:
	case <-time.After(10 * time.Second):
		t.Fatal("the watcher did not see node-b lead")
	}
	mu.Lock()
	defer mu.Unlock()
	var owners []string
	var tokens []uint64
	for _, s := range seen {
		if s.Held {
			owners = append(owners, s.Owner)
			tokens = append(tokens, s.FencingToken)
		}
	}
	if owners[0] != "node-a" || owners[len(owners)-1] != "node-b" || !slices.IsSorted(tokens) {
		t.Fatalf("the watcher saw %v", seen)
	}
}

func TestScenario05ASemaphoreNeverHasMoreHoldersThanItsLimit(t *testing.T) {
	server := startServer(t, startRedis(t))
	ctx := context.Background()
	var holders, most atomic.Int32
	var group sync.WaitGroup
	for n := range 20 {
		group.Go(func() {
			client, err := turnstile.New(turnstile.Options{Server: server.url()})
			if err != nil {
				t.Error(err)
				return
			}
			defer client.Close()
			for range 5 {
				permit, err := client.Semaphore(ctx, "pool", 3, 10*time.Second, turnstile.WithOwner(fmt.Sprintf("c%d", n)))
				if err != nil {
					t.Error(err)
					return
				}
				now := holders.Add(1)
				for most.Load() < now && !most.CompareAndSwap(most.Load(), now) {
				}
				time.Sleep(10 * time.Millisecond) // the work done under the permit
				holders.Add(-1)
				if _, err := permit.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	group.Wait()
	if m := most.Load(); m < 1 || m > 3 {
		t.Fatalf("%d holders at once", m)
	}
}

func TestScenario06AWorkerHandlesEachTaskOnceRetriesFailuresAndHonoursRetry(t *testing.T) {
	server := startServer(t, startRedis(t))
	client := newClient(t, turnstile.Options{Server: server.url()})
	ctx := context.Background()
	var mu sync.Mutex
	handled := map[string]int{}
	attempts := map[string][]time.Time{}
	handle := func(ctx context.Context, task *turnstile.Task) error {
		mu.Lock()
		attempts[task.ID] = append(attempts[task.ID], time.Now())
		mu.Unlock()
		if task.ID == "fails-once" && task.Attempt == 1 {
			return errors.New("boom")
		}
		if task.ID == "retry-later" && task.Attempt == 1 {
			return turnstile.RetryAfter(700 * time.Millisecond)
		}
		mu.Lock()
		handled[task.ID]++
		mu.Unlock()
		return nil
	}
	queue := client.Queue("jobs")
	var ids []string
	for start := 0; start < 1000; start += 100 {
		var batch []turnstile.NewTask
		for i := start; i < start+100; i++ {
			batch = append(batch, turnstile.NewTask{Payload: []byte(fmt.Sprint(i))})
		}
		added, err := queue.EnqueueMany(ctx, batch)
		check(t, err)
		for _, a := range added {
			ids = append(ids, a.ID)
		}
	}
	_, err := queue.Enqueue(ctx, []byte("x"), turnstile.WithID("fails-once"))
	check(t, err)
	_, err = queue.Enqueue(ctx, []byte("x"), turnstile.WithID("retry-later"))
	check(t, err)
	backoff := turnstile.Backoff{Initial: 300 * time.Millisecond, Factor: 2, Max: time.Minute, Jitter: 0.2}
	stop := runWorker(t, client.Worker("jobs", handle, turnstile.WorkerOptions{Concurrency: 8, Backoff: &backoff}))
	eventually(t, "every task handled", 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == 1002
	})
	eventually(t, "every ack landed", 30*time.Second, func() bool {
		stats, err := queue.Stats(ctx)
		return err == nil && stats.InFlight == 0
	})
	stop()
	stats, err := queue.Stats(ctx)
	check(t, err)
	if stats.Ready+stats.Delayed+stats.InFlight+stats.Dead != 0 {
		t.Fatalf("left in the queue: %+v", stats)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if handled[id] != 1 {
			t.Fatalf("task %s handled %d times", id, handled[id])
		}
	}
	failed, later := attempts["fails-once"], attempts["retry-later"]
	if len(failed) != 2 || failed[1].Sub(failed[0]) < 240*time.Millisecond {
		t.Fatalf("the failed task's attempts: %v", failed)
	}
	if len(later) != 2 || later[1].Sub(later[0]) < 700*time.Millisecond {
		t.Fatalf("the retried task's attempts: %v", later)
	}
}

func TestAFailuresTextIsTheTasksLastErrorAndFailGivesUp(t *testing.T) {
	server := startServer(t, startRedis(t))
	client := newClient(t, turnstile.Options{Server: server.url()})
	ctx := context.Background()
	var mu sync.Mutex
	seen := map[string][]string{}
	handle := func(ctx context.Context, task *turnstile.Task) error {
		mu.Lock()
		seen[task.ID] = append(seen[task.ID], task.LastError)
		mu.Unlock()
		if task.ID == "broken" && task.Attempt == 1 {
			return errors.New("the disk is full")
		}
		if task.ID == "hopeless" {
			return turnstile.Fail("no such customer")
		}
		return nil
	}
	queue := client.Queue("outcomes")
	for _, id := range []string{"broken", "hopeless"} {
		_, err := queue.Enqueue(ctx, []byte("x"), turnstile.WithID(id))
		check(t, err)
	}
	backoff := turnstile.Backoff{Initial: 100 * time.Millisecond, Factor: 2, Max: time.Second}
	stop := runWorker(t, client.Worker("outcomes", handle, turnstile.WorkerOptions{Backoff: &backoff}))
	eventually(t, "both ended", 30*time.Second, func() bool {
		mu.Lock()
		n := len(seen["broken"])
		mu.Unlock()
		stats, err := queue.Stats(ctx)
		return n == 2 && err == nil && stats.Dead == 1
	})
	stop()
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(seen["broken"], []string{"", "the disk is full"}) {
		t.Fatalf("the retry saw %q", seen["broken"])
	}
	dead, err := queue.Peek(ctx, turnstile.Dead, 10)
	check(t, err)
	if len(dead) != 1 || dead[0].ID != "hopeless" || dead[0].Attempt != 1 || dead[0].LastError != "no such customer" {
		t.Fatalf("dead: %+v", dead)
	}
}

func TestProgressRidesOnTheExtensionAndARetryResumesFromIt(t *testing.T) {
	server := startServer(t, startRedis(t))
	client := newClient(t, turnstile.Options{Server: server.url()})
	ctx := context.Background()
	queue := client.Queue("resumable")
	_, err := queue.Enqueue(ctx, []byte("x"), turnstile.WithID("job"))
	check(t, err)
	var mu sync.Mutex
	var seen []string
	handle := func(ctx context.Context, task *turnstile.Task) error {
		mu.Lock()
		seen = append(seen, string(task.Progress))
		mu.Unlock()
		if task.Attempt > 1 {
			return nil
		}
		task.SetProgress([]byte("step 3 of 5"))
		// Fails once the server has it (the next extension carried it).
		eventually(t, "the progress kept", 10*time.Second, func() bool {
			running, err := queue.Peek(ctx, turnstile.InFlight, 1)
			return err == nil && len(running) == 1 && string(running[0].Progress) == "step 3 of 5"
		})
		return turnstile.RetryAfter(0)
	}
	stop := runWorker(t, client.Worker("resumable", handle, turnstile.WorkerOptions{Visibility: 600 * time.Millisecond}))
	eventually(t, "the retry done", 30*time.Second, func() bool {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		stats, err := queue.Stats(ctx)
		return n == 2 && err == nil && stats.InFlight == 0
	})
	stop()
	if !slices.Equal(seen, []string{"", "step 3 of 5"}) {
		t.Fatalf("the attempts saw %q", seen)
	}
}

func TestScenario07AHandlerRunningThreeVisibilitiesIsNotDeliveredTwice(t *testing.T) {
	server := startServer(t, startRedis(t))
	client := newClient(t, turnstile.Options{Server: server.url()})
	ctx := context.Background()
	var deliveries atomic.Int32
	handle := func(ctx context.Context, task *turnstile.Task) error {
		deliveries.Add(1)
		time.Sleep(3 * time.Second) // three times the visibility
		return nil
	}
	queue := client.Queue("long")
	_, err := queue.Enqueue(ctx, []byte("slow"), turnstile.WithID("slow"))
	check(t, err)
	stop := runWorker(t, client.Worker("long", handle, turnstile.WorkerOptions{Visibility: time.Second}))
	eventually(t, "the task is acked", 30*time.Second, func() bool {
		stats, err := queue.Stats(ctx)
		return deliveries.Load() == 1 && err == nil && stats.InFlight == 0 && stats.Ready == 0
	})
	stop()
	if n := deliveries.Load(); n != 1 {
		t.Fatalf("delivered %d times", n)
	}
}

func readLog(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var lines []string
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			lines = append(lines, line)
		}
	}
	return lines
}

// logged is the ids of the log's lines that start with what.
func logged(lines []string, what string) map[string]bool {
	ids := map[string]bool{}
	for _, line := range lines {
		if id, found := strings.CutPrefix(line, what+" "); found {
			ids[id] = true
		}
	}
	return ids
}

func TestScenario08SIGTERMDrainsAWorkerProcess(t *testing.T) {
	server := startServer(t, startRedis(t))
	client := newClient(t, turnstile.Options{Server: server.url()})
	ctx := context.Background()
	queue := client.Queue("drain")
	ids := map[string]bool{}
	for i := range 40 {
		added, err := queue.Enqueue(ctx, []byte(fmt.Sprint(i)))
		check(t, err)
		ids[added.ID] = true
	}
	log := filepath.Join(t.TempDir(), "worker.log")
	worker := spawn(t, server, "worker", map[string]string{
		"QUEUE": "drain", "LOG": log, "SLEEP": "500ms", "CONCURRENCY": "4",
	})
	check(t, worker.Start())
	eventually(t, "four handlers run", 30*time.Second, func() bool {
		return len(logged(readLog(t, log), "start")) >= 4
	})
	check(t, worker.Process.Signal(syscall.SIGTERM))
	sent := time.Now()
	check(t, worker.Wait())
	if time.Since(sent) > 10*time.Second {
		t.Fatalf("exited %s after SIGTERM", time.Since(sent))
	}
	lines := readLog(t, log)
	started, done := logged(lines, "start"), logged(lines, "done")
	if len(started) != len(done) || lines[len(lines)-1] != "exited" {
		t.Fatalf("not every running handler finished: %v", lines)
	}
	// What finished was acked; nothing else was: the rest are all back and ready.
	left, err := queue.Peek(ctx, turnstile.Ready, 100)
	check(t, err)
	for _, task := range left {
		if done[task.ID] || !ids[task.ID] {
			t.Fatalf("task %s is ready again", task.ID)
		}
	}
	stats, err := queue.Stats(ctx)
	check(t, err)
	if len(left)+len(done) != 40 || stats.InFlight != 0 {
		t.Fatalf("%d ready, %d done, %+v", len(left), len(done), stats)
	}
}

func TestScenario09AKilledWorkersTasksReachAnotherWorker(t *testing.T) {
	server := startServer(t, startRedis(t))
	client := newClient(t, turnstile.Options{Server: server.url()})
	ctx := context.Background()
	queue := client.Queue("crash")
	ids := map[string]bool{}
	for start := 0; start < 1000; start += 250 {
		var batch []turnstile.NewTask
		for i := start; i < start+250; i++ {
			batch = append(batch, turnstile.NewTask{Payload: []byte(fmt.Sprint(i))})
		}
		added, err := queue.EnqueueMany(ctx, batch)
		check(t, err)
		for _, a := range added {
			ids[a.ID] = true
		}
	}
	log := filepath.Join(t.TempDir(), "worker.log")
	doomed := spawn(t, server, "worker", map[string]string{
		"QUEUE": "crash", "LOG": log, "SLEEP": "10ms", "CONCURRENCY": "8",
	})
	check(t, doomed.Start())
	eventually(t, "the doomed worker handles some", 30*time.Second, func() bool {
		return len(readLog(t, log)) >= 100
	})
	check(t, doomed.Process.Kill())
	_ = doomed.Wait()
	var mu sync.Mutex
	handled := map[string]bool{}
	handle := func(ctx context.Context, task *turnstile.Task) error {
		mu.Lock()
		handled[task.ID] = true
		mu.Unlock()
		return nil
	}
	stop := runWorker(t, client.Worker("crash", handle, turnstile.WorkerOptions{Concurrency: 8}))
	byDoomed := logged(readLog(t, log), "done")
	eventually(t, "all 1,000 handled at least once", 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for id := range ids {
			if !handled[id] && !byDoomed[id] {
				return false
			}
		}
		return true
	})
	stop()
}

func TestScenario10ProducerAndWorkerThroughAServerRestart(t *testing.T) {
	server := startServer(t, startRedis(t))
	client := newClient(t, turnstile.Options{Server: server.url()})
	ctx := context.Background()
	queue := client.Queue("restart")
	var mu sync.Mutex
	handled := map[string]int{}
	var enqueued []string
	handle := func(ctx context.Context, task *turnstile.Task) error {
		mu.Lock()
		handled[task.ID]++
		mu.Unlock()
		return nil
	}
	stop := runWorker(t, client.Worker("restart", handle, turnstile.WorkerOptions{Concurrency: 4}))
	produced := make(chan error, 1)
	go func() {
		for i := range 400 {
			payload, _ := turnstile.JSONPayload(map[string]int{"n": i})
			added, err := queue.Enqueue(ctx, payload)
			if err != nil {
				produced <- err
				return
			}
			mu.Lock()
			enqueued = append(enqueued, added.ID)
			mu.Unlock()
		}
		produced <- nil
	}()
	eventually(t, "some tasks are in", 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(enqueued) >= 100
	})
	server.kill()
	server.start()
	select {
	case err := <-produced:
		check(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("the producer did not finish")
	}
	eventually(t, "every task handled", 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range enqueued {
			if handled[id] == 0 {
				return false
			}
		}
		return true
	})
	eventually(t, "the queue is empty", 30*time.Second, func() bool {
		stats, err := queue.Stats(ctx)
		return err == nil && stats.InFlight+stats.Ready == 0
	})
	stop()
	mu.Lock()
	defer mu.Unlock()
	// None enqueued twice: the library's ids made each retry a duplicate.
	if len(enqueued) != 400 || len(handled) != 400 {
		t.Fatalf("%d enqueued, %d handled", len(enqueued), len(handled))
	}
}

func writeAuth(t *testing.T, token string) string {
	t.Helper()
	digest := sha256.Sum256([]byte(token))
	path := filepath.Join(t.TempDir(), "tokens.toml")
	body := fmt.Sprintf("[[token]]\nsha256 = %q\ntenant = \"t\"\npermissions = [\"lock\", \"produce\", \"consume\", \"admin\"]\n", hex.EncodeToString(digest[:]))
	check(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

func TestScenario11ErrorsAreTypedAndNameTheField(t *testing.T) {
	server := startServer(t, startRedis(t), "--auth-file", writeAuth(t, "right-token"))
	ctx := context.Background()
	client := newClient(t, turnstile.Options{Server: server.url(), Token: "right-token"})
	_, err := client.Queue("bad\nname").Enqueue(ctx, []byte("x"))
	var bad *turnstile.Error
	if !errors.Is(err, turnstile.ErrInvalidArgument) || !errors.As(err, &bad) || !strings.HasPrefix(bad.Message, "queue") {
		t.Fatalf("a bad queue name: %v", err)
	}
	_, err = client.TryLock(ctx, "", time.Second)
	if !errors.Is(err, turnstile.ErrInvalidArgument) || !errors.As(err, &bad) || !strings.HasPrefix(bad.Message, "name") {
		t.Fatalf("an empty lock name: %v", err)
	}
	wrong := newClient(t, turnstile.Options{Server: server.url(), Token: "wrong-token"})
	if _, err := wrong.Queue("q").Stats(ctx); !errors.Is(err, turnstile.ErrUnauthenticated) {
		t.Fatalf("a wrong token: %v", err)
	}
}

func TestScenario12TLSWithAPrivateCAAndATokenFromTheEnvironment(t *testing.T) {
	dir := t.TempDir()
	at := func(name string) string { return filepath.Join(dir, name) }
	openssl := func(args ...string) {
		if out, err := exec.Command("openssl", args...).CombinedOutput(); err != nil {
			t.Fatalf("openssl %v: %v\n%s", args, err, out)
		}
	}
	openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", at("ca.key"), "-out", at("ca.pem"),
		"-days", "1", "-subj", "/CN=turnstile test CA")
	openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", at("s.key"), "-out", at("s.csr"), "-subj", "/CN=127.0.0.1")
	check(t, os.WriteFile(at("ext.cnf"), []byte("subjectAltName=IP:127.0.0.1\n"), 0o600))
	openssl("x509", "-req", "-in", at("s.csr"), "-CA", at("ca.pem"), "-CAkey", at("ca.key"), "-CAcreateserial",
		"-out", at("s.pem"), "-days", "1", "-extfile", at("ext.cnf"))
	server := startServer(t, startRedis(t), "--tls-cert", at("s.pem"), "--tls-key", at("s.key"),
		"--auth-file", writeAuth(t, "s3cret"))
	t.Setenv("TURNSTILE_SERVER", "https://"+server.addr())
	t.Setenv("TURNSTILE_TOKEN", "s3cret")
	t.Setenv("TURNSTILE_CA_CERT", at("ca.pem"))
	ctx := context.Background()
	client := newClient(t, turnstile.Options{})
	lease, err := client.Lock(ctx, "over-tls", 5*time.Second)
	check(t, err)
	if lease.FencingToken == 0 {
		t.Fatal("no fencing token")
	}
	_, err = lease.Release(ctx)
	check(t, err)
	added, err := client.Queue("tls").Enqueue(ctx, []byte("x"))
	check(t, err)
	if !added.Created {
		t.Fatal("not created")
	}
	t.Setenv("TURNSTILE_TOKEN", "")
	anonymous := newClient(t, turnstile.Options{})
	if _, err := anonymous.Queue("tls").Stats(ctx); !errors.Is(err, turnstile.ErrUnauthenticated) {
		t.Fatalf("no token: %v", err)
	}
}

func TestWatchIsReopenedAfterItsServerRestarts(t *testing.T) {
	server := startServer(t, startRedis(t))
	client := newClient(t, turnstile.Options{Server: server.url()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	states := make(chan turnstile.LockState, 16)
	go func() {
		for state, err := range client.Watch(ctx, "watched") {
			if err != nil {
				t.Error(err)
				return
			}
			states <- state
		}
	}()
	if first := <-states; first.Held {
		t.Fatalf("held at first: %+v", first)
	}
	server.restart()
	lease, err := client.Lock(ctx, "watched", 5*time.Second, turnstile.WithOwner("after-restart"))
	check(t, err)
	select {
	case state := <-states:
		if !state.Held || state.Owner != "after-restart" || state.FencingToken != lease.FencingToken {
			t.Fatalf("after the restart: %+v", state)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the watch saw nothing after the restart")
	}
	_, err = lease.Release(ctx)
	check(t, err)
}

func TestACallReturnsTheHandlersResultAndAFailedOneItsReason(t *testing.T) {
	server := startServer(t, startRedis(t))
	client := newClient(t, turnstile.Options{Server: server.url()})
	ctx := context.Background()
	handle := func(ctx context.Context, task *turnstile.Task) error {
		var in struct{ N int }
		if err := task.JSON(&in); err != nil {
			return turnstile.Fail(err.Error())
		}
		if in.N == 13 {
			return turnstile.Fail("unlucky")
		}
		out, err := turnstile.JSONPayload(map[string]int{"square": in.N * in.N})
		task.SetResult(out)
		return err
	}
	stop := runWorker(t, client.Worker("squares", handle, turnstile.WorkerOptions{Concurrency: 2}))
	queue := client.Queue("squares")
	result, err := queue.Call(ctx, []byte(`{"n":7}`), 30*time.Second, turnstile.WithID("seven"))
	check(t, err)
	if string(result) != `{"square":49}` {
		t.Fatalf("result %s", result)
	}
	_, err = queue.Call(ctx, []byte(`{"n":13}`), 30*time.Second, turnstile.WithID("thirteen"))
	var failed *turnstile.TaskFailedError
	if !errors.As(err, &failed) || failed.State != turnstile.Dead || failed.LastError != "unlucky" {
		t.Fatalf("a failed call: %v", err)
	}
	story, err := queue.Get(ctx, "thirteen")
	check(t, err)
	if len(story.History) != 1 || story.History[0].Outcome != "gave_up" || story.History[0].Error != "unlucky" {
		t.Fatalf("history %+v", story.History)
	}
	// A finished task that is not kept is gone; waiting for it runs out.
	if _, err := queue.Get(ctx, "seven"); !errors.Is(err, turnstile.ErrNotFound) {
		t.Fatalf("get of a finished task: %v", err)
	}
	if task, err := queue.Wait(ctx, "seven", 200*time.Millisecond); err != nil || task != nil {
		t.Fatalf("wait of a finished task: %v %v", task, err)
	}
	stop()
}

func TestARunningTaskCancelledEndsItsHandlersContext(t *testing.T) {
	server := startServer(t, startRedis(t))
	client := newClient(t, turnstile.Options{Server: server.url()})
	ctx := context.Background()
	started, told := make(chan struct{}), make(chan struct{})
	handle := func(ctx context.Context, task *turnstile.Task) error {
		close(started)
		select {
		case <-ctx.Done():
			close(told)
		case <-time.After(30 * time.Second):
		}
		return nil
	}
	w := client.Worker("endless", handle, turnstile.WorkerOptions{})
	stop := runWorker(t, w)
	queue := client.Queue("endless")
	// Kept once ended, so a wait begun after the end still finds it.
	check(t, queue.Configure(ctx, turnstile.QueueConfig{KeepCompleted: &turnstile.Retention{Count: 10}}))
	_, err := queue.Enqueue(ctx, []byte("x"), turnstile.WithID("forever"))
	check(t, err)
	<-started
	cancelled, err := queue.Cancel(ctx, []string{"forever"}, true)
	check(t, err)
	if !slices.Equal(cancelled, []string{"forever"}) {
		t.Fatalf("cancelled %v", cancelled)
	}
	ended, err := queue.Wait(ctx, "forever", 30*time.Second)
	check(t, err)
	if ended == nil || ended.State != turnstile.Cancelled {
		t.Fatalf("ended %+v", ended)
	}
	// Told by the stream's cancelled event, well before the lease extension at two
	// thirds of the 30 s visibility would have found the lease gone.
	select {
	case <-told:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context did not end")
	}
	if len(ended.History) != 1 || ended.History[0].Outcome != "cancelled" || ended.History[0].WorkerID != w.WorkerID {
		t.Fatalf("history %+v", ended.History)
	}
	stop()
}

func TestSchedulesArePutListedPausedTriggeredAndDeleted(t *testing.T) {
	server := startServer(t, startRedis(t))
	client := newClient(t, turnstile.Options{Server: server.url()})
	ctx := context.Background()
	schedules := client.Schedules()
	put, err := schedules.Put(ctx, turnstile.ScheduleSpec{Name: "nightly", Queue: "reports", Cron: "0 3 * * *", TimeZone: "Europe/Paris", Payload: []byte("report")})
	check(t, err)
	if put.NextFireAt.IsZero() || put.Cron != "0 3 * * *" {
		t.Fatalf("put %+v", put)
	}
	_, err = schedules.Put(ctx, turnstile.ScheduleSpec{Name: "ticker", Queue: "ticks", Every: time.Minute})
	check(t, err)
	listed, err := schedules.List(ctx, "nig")
	check(t, err)
	if len(listed) != 1 || listed[0].Name != "nightly" {
		t.Fatalf("listed %+v", listed)
	}
	paused, err := schedules.Pause(ctx, "nightly")
	check(t, err)
	if !paused.Paused || paused.TimeZone != "Europe/Paris" {
		t.Fatalf("paused %+v", paused)
	}
	id, err := schedules.Trigger(ctx, "nightly")
	check(t, err)
	task, err := client.Queue("reports").Get(ctx, id)
	check(t, err)
	if string(task.Payload) != "report" {
		t.Fatalf("triggered %+v", task)
	}
	resumed, err := schedules.Resume(ctx, "nightly")
	check(t, err)
	if resumed.Paused {
		t.Fatal("still paused")
	}
	deleted, err := schedules.Delete(ctx, "nightly")
	check(t, err)
	gone, err := schedules.Get(ctx, "nightly")
	check(t, err)
	if !deleted || gone != nil {
		t.Fatalf("deleted %v, then %+v", deleted, gone)
	}
	if _, err := schedules.Put(ctx, turnstile.ScheduleSpec{Name: "both", Queue: "q"}); !errors.Is(err, turnstile.ErrInvalidArgument) {
		t.Fatalf("neither cron nor every: %v", err)
	}
}

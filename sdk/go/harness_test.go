package turnstile_test

// Real processes for the scenarios: a redis-server and `turnstile serve` (the binary
// TURNSTILE_BIN names, else the repository's target/debug/turnstile) on free
// loopback ports, each in a temp dir of its own and killed when the test ends; the
// same shape as the other languages' harnesses. The scenarios' own programs (a
// campaigning candidate, a worker to SIGTERM or SIGKILL) are this test binary run
// again with TURNSTILE_GO_PROGRAM set (TestMain).

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func freePort(t testing.TB) int {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("a free port: %v", err)
	}
	defer listener.Close()
	return listener.Addr().(*net.TCPAddr).Port
}

func turnstileBin(t testing.TB) string {
	t.Helper()
	path := os.Getenv("TURNSTILE_BIN")
	if path == "" {
		path, _ = filepath.Abs("../../target/debug/turnstile")
	}
	if info, err := os.Stat(path); err != nil || info.Mode()&0o111 == 0 {
		t.Fatalf("no turnstile binary at %s: run `cargo build` or set TURNSTILE_BIN", path)
	}
	return path
}

// eventually polls check (observable state) until it holds; fails naming what.
func eventually(t testing.TB, what string, within time.Duration, check func() bool) {
	t.Helper()
	end := time.Now().Add(within)
	for !check() {
		if time.Now().After(end) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testRedis is a redis-server on a free port; stop and start it again on the same
// port.
type testRedis struct {
	t    testing.TB
	port int
	dir  string
	cmd  *exec.Cmd
}

func startRedis(t testing.TB) *testRedis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is not installed")
	}
	r := &testRedis{t: t, port: freePort(t), dir: t.TempDir()}
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *testRedis) url() string { return fmt.Sprintf("redis://127.0.0.1:%d", r.port) }

func (r *testRedis) start() {
	r.t.Helper()
	r.cmd = exec.Command("redis-server", "--port", fmt.Sprint(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir)
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("redis-server: %v", err)
	}
	eventually(r.t, "redis answers", 10*time.Second, func() bool {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", r.port), 500*time.Millisecond)
		if err != nil {
			return false
		}
		defer conn.Close()
		_, _ = conn.Write([]byte("PING\r\n"))
		reply := make([]byte, 5)
		_, err = conn.Read(reply)
		return err == nil && string(reply) == "+PONG"
	})
}

func (r *testRedis) stop() {
	if r.cmd != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
		r.cmd = nil
	}
}

// testServer is `turnstile serve` on redis; its stderr kept line by line.
type testServer struct {
	t     testing.TB
	redis *testRedis
	extra []string
	port  int
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
}

func startServer(t testing.TB, redis *testRedis, extra ...string) *testServer {
	t.Helper()
	s := &testServer{t: t, redis: redis, extra: extra, port: freePort(t)}
	s.start()
	t.Cleanup(s.kill)
	// A failed test shows what its server logged.
	t.Cleanup(func() {
		if t.Failed() {
			s.mu.Lock()
			defer s.mu.Unlock()
			t.Logf("the server's log:\n%s", strings.Join(s.lines, "\n"))
		}
	})
	return s
}

func (s *testServer) addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

func (s *testServer) url() string {
	for _, arg := range s.extra {
		if arg == "--tls-cert" {
			return "https://" + s.addr()
		}
	}
	return "http://" + s.addr()
}

func (s *testServer) start() {
	s.t.Helper()
	args := append([]string{"serve", "--listen", s.addr(), "--metrics-listen", "127.0.0.1:0",
		"--dashboard-listen", "off", "--redis-url", s.redis.url(), "--log-format", "json",
		"--reattach-grace", "2s", "--shutdown-grace", "5s"}, s.extra...)
	cmd := exec.Command(turnstileBin(s.t), args...)
	cmd.Env = withoutToken(os.Environ())
	stderr, err := cmd.StderrPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("turnstile serve: %v", err)
	}
	s.cmd = cmd
	ready := make(chan struct{})
	go func() {
		scanner := bufio.NewScanner(stderr)
		scanner.Buffer(make([]byte, 1<<20), 1<<20)
		once := sync.Once{}
		for scanner.Scan() {
			line := scanner.Text()
			s.mu.Lock()
			s.lines = append(s.lines, line)
			s.mu.Unlock()
			if strings.Contains(line, `"ready"`) {
				once.Do(func() { close(ready) })
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		s.mu.Lock()
		defer s.mu.Unlock()
		s.t.Fatalf("turnstile serve did not log ready:\n%s", strings.Join(s.lines, "\n"))
	}
}

func withoutToken(env []string) []string {
	kept := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "TURNSTILE_TOKEN=") {
			kept = append(kept, kv)
		}
	}
	return kept
}

// kill is a SIGKILL, as a crash.
func (s *testServer) kill() {
	if s.cmd != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

// restart is a SIGTERM (a rolling restart), then the server again on its port.
func (s *testServer) restart() {
	s.t.Helper()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		_ = s.cmd.Wait()
		s.cmd = nil
	}
	s.start()
}

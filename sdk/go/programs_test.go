package turnstile_test

// The programs the scenarios run as processes of their own (to SIGKILL or SIGTERM
// them): this test binary again, with TURNSTILE_GO_PROGRAM naming the program and
// its arguments in PROGRAM_* variables; the server comes from TURNSTILE_SERVER, as
// for any user of the library.
//
//	candidate: campaign for PROGRAM_NAME as PROGRAM_OWNER; print "leading <token>"
//	worker:    work PROGRAM_QUEUE (PROGRAM_CONCURRENCY handlers, each sleeping
//	           PROGRAM_SLEEP), logging "start <id>" and "done <id>" to PROGRAM_LOG,
//	           then "exited"

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	turnstile "turnstile.dev/turnstile-go"
)

func TestMain(m *testing.M) {
	switch os.Getenv("TURNSTILE_GO_PROGRAM") {
	case "candidate":
		candidate()
	case "worker":
		worker()
	default:
		os.Exit(m.Run())
	}
}

func candidate() {
	client, err := turnstile.New(turnstile.Options{})
	must(err)
	ttl, err := time.ParseDuration(os.Getenv("PROGRAM_TTL"))
	must(err)
	lease, err := client.Campaign(context.Background(), os.Getenv("PROGRAM_NAME"), os.Getenv("PROGRAM_OWNER"), ttl)
	must(err)
	fmt.Printf("leading %d\n", lease.FencingToken)
	<-lease.Lost()
	os.Exit(1)
}

func worker() {
	log, err := os.OpenFile(os.Getenv("PROGRAM_LOG"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	must(err)
	var mu sync.Mutex
	note := func(line string) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = log.WriteString(line + "\n")
		_ = log.Sync()
	}
	pause, err := time.ParseDuration(os.Getenv("PROGRAM_SLEEP"))
	must(err)
	concurrency, err := strconv.Atoi(os.Getenv("PROGRAM_CONCURRENCY"))
	must(err)
	client, err := turnstile.New(turnstile.Options{})
	must(err)
	// A process' main worker drains on SIGTERM and SIGINT: its context ends.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	work := func(ctx context.Context, t *turnstile.Task) error {
		note("start " + t.ID)
		time.Sleep(pause) // the work itself
		note("done " + t.ID)
		return nil
	}
	w := client.Worker(os.Getenv("PROGRAM_QUEUE"), work, turnstile.WorkerOptions{
		Concurrency: concurrency, DrainTimeout: 10 * time.Second,
	})
	must(w.Run(ctx))
	note("exited")
	os.Exit(0)
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}

// spawn runs a program against server with env's PROGRAM_* settings.
func spawn(t *testing.T, server *testServer, program string, env map[string]string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "TURNSTILE_GO_PROGRAM="+program, "TURNSTILE_SERVER="+server.url())
	for key, value := range env {
		cmd.Env = append(cmd.Env, "PROGRAM_"+key+"="+value)
	}
	cmd.Stderr = os.Stderr
	t.Cleanup(func() {
		if cmd.Process != nil && cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}

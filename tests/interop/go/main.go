// turnstile from Go through the raw generated stubs (sdk/go/pb, protoc-gen-go and
// protoc-gen-go-grpc; none of the library): a lock round trip, Hold with a re-attach by
// token, Enqueue, Subscribe and Ack against a real server. Usage: interop HOST:PORT
// METRICS_HOST:PORT. Exits non-zero on the first broken expectation.
package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "turnstile.dev/turnstile-go/pb/turnstile/v1"
)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func must[T any](value T, err error) T {
	if err != nil {
		fail("%v", err)
	}
	return value
}

// waitFor checks done every 20 ms until it holds, failing after 10 s.
func waitFor(what string, done func() bool) {
	deadline := time.Now().Add(10 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			fail("not within 10 s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metric is the value of name (with its labels) in a scrape of /metrics, or -1.
func metric(address, name string) float64 {
	reply, err := http.Get("http://" + address + "/metrics")
	if err != nil {
		return -1
	}
	defer reply.Body.Close()
	lines := bufio.NewScanner(reply.Body)
	for lines.Scan() {
		if value, found := strings.CutPrefix(lines.Text(), name+" "); found {
			return must(strconv.ParseFloat(value, 64))
		}
	}
	return -1
}

// nextHold is the next Hold event other than a heartbeat.
func nextHold(stream grpc.ServerStreamingClient[pb.HoldResponse]) *pb.HoldResponse {
	for {
		m := must(stream.Recv())
		if m.GetHeartbeat() == nil {
			return m
		}
	}
}

func main() {
	address, metrics := os.Args[1], os.Args[2]
	conn := must(grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials())))
	defer conn.Close()
	locks, queues := pb.NewLockServiceClient(conn), pb.NewQueueServiceClient(conn)
	ctx := context.Background()

	// A lock round trip.
	won := must(locks.Acquire(ctx, &pb.AcquireRequest{Name: "go-lock", Owner: "go", Ttl: durationpb.New(30 * time.Second)}))
	if !won.Acquired || won.FencingToken == 0 {
		fail("not acquired: %v", won)
	}
	seen := must(locks.Describe(ctx, &pb.DescribeRequest{Name: "go-lock", Token: won.Token}))
	if !seen.Held || !seen.HeldByToken || seen.Info.Owner != "go" {
		fail("described: %v", seen)
	}
	again := must(locks.Acquire(ctx, &pb.AcquireRequest{Name: "go-lock", Owner: "other"}))
	if again.Acquired || again.Holder.Owner != "go" {
		fail("acquired twice: %v", again)
	}
	if !must(locks.Release(ctx, &pb.ReleaseRequest{Name: "go-lock", Token: won.Token})).Released {
		fail("not released")
	}

	// Hold, then re-attach by token on a new stream: the same lease.
	firstCtx, cancelFirst := context.WithCancel(ctx)
	first := must(locks.Hold(firstCtx, &pb.HoldRequest{Name: "go-hold", Owner: "go", Ttl: durationpb.New(3 * time.Second)}))
	acquired := nextHold(first).GetAcquired()
	secondCtx, cancelSecond := context.WithCancel(ctx)
	second := must(locks.Hold(secondCtx, &pb.HoldRequest{Name: "go-hold", Owner: "go", Ttl: durationpb.New(3 * time.Second), Token: acquired.GetToken()}))
	reattached := nextHold(second).GetAcquired()
	if reattached.GetToken() != acquired.GetToken() || reattached.GetFencingToken() != acquired.GetFencingToken() {
		fail("re-attached to another lease: %v, %v", reattached, acquired)
	}
	cancelFirst() // The replaced stream's end does not release the lease.
	waitFor("the replaced stream ended", func() bool { return metric(metrics, `turnstile_streams_open{kind="hold"}`) == 1 })
	if !must(locks.Describe(ctx, &pb.DescribeRequest{Name: "go-hold", Token: acquired.GetToken()})).HeldByToken {
		fail("the replaced stream's end released the lease")
	}
	if nextHold(second).GetRenewed() == nil {
		fail("no renewal on the re-attached stream")
	}
	cancelSecond() // Cancelling the stream that holds it releases at once.
	waitFor("released after the cancel", func() bool {
		return !must(locks.Describe(ctx, &pb.DescribeRequest{Name: "go-hold"})).Held
	})

	// Enqueue two tasks, Subscribe, Ack both.
	queued := must(queues.Enqueue(ctx, &pb.EnqueueRequest{Queue: "go-q", Tasks: []*pb.TaskSpec{
		{Id: "a", Payload: []byte("one")}, {Id: "b", Payload: []byte("two")},
	}}))
	if !queued.Results[0].Created || !queued.Results[1].Created {
		fail("not created: %v", queued)
	}
	streamCtx, closeStream := context.WithCancel(ctx)
	stream := must(queues.Subscribe(streamCtx, &pb.SubscribeRequest{Queue: "go-q", MaxInFlight: 2}))
	var got, receipts []string
	for len(got) < 2 {
		if task := must(stream.Recv()).GetTask(); task != nil {
			got = append(got, fmt.Sprintf("%s %s %d", task.Id, task.Payload, task.Attempt))
			receipts = append(receipts, task.Receipt)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"a one 1", "b two 1"}) {
		fail("delivered %v", got)
	}
	acked := must(queues.Ack(ctx, &pb.AckRequest{Queue: "go-q", Receipts: receipts}))
	if !slices.Equal(acked.Acked, []bool{true, true}) {
		fail("acked %v", acked.Acked)
	}
	closeStream()
	stats := must(queues.Stats(ctx, &pb.StatsRequest{Queue: "go-q"}))
	if stats.Ready+stats.Delayed+stats.InFlight+stats.Dead != 0 {
		fail("left: %v", stats)
	}

	// Errors arrive as gRPC status codes.
	_, err := queues.Enqueue(ctx, &pb.EnqueueRequest{Queue: "", Tasks: []*pb.TaskSpec{{}}})
	if s, _ := status.FromError(err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), "queue") {
		fail("a bad queue name: %v", err)
	}
	fmt.Println("go interop ok")
}

// turnstile from C++ through the stubs protoc and grpc_cpp_plugin generate from proto/
// (Debian's libgrpc++-dev and protobuf-compiler-grpc): a lock round trip, Hold with a
// re-attach by token, Enqueue, Subscribe and Ack against a real server. Usage: interop
// HOST:PORT METRICS_HOST:PORT. Exits non-zero on the first broken expectation.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "turnstile/v1/lock.grpc.pb.h"
#include "turnstile/v1/queue.grpc.pb.h"

namespace v1 = turnstile::v1;

static void check(bool holds, const std::string& what) {
  if (!holds) {
    std::cerr << "broken: " << what << std::endl;
    std::exit(1);
  }
}

static void ok(const grpc::Status& status, const std::string& what) {
  check(status.ok(), what + ": " + status.error_message());
}

// Checks `done` every 20 ms until it holds, failing after 10 s.
static void wait_for(const std::string& what, const std::function<bool()>& done) {
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    check(std::chrono::steady_clock::now() < end, "not within 10 s: " + what);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The value of `name` (with its labels) in a scrape of /metrics, or -1: a plain
// HTTP/1.0 GET over a socket.
static double metric(const std::string& address, const std::string& name) {
  auto colon = address.rfind(':');
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &at.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  std::string request = "GET /metrics HTTP/1.0\r\nHost: " + address + "\r\n\r\n";
  if (write(fd, request.data(), request.size()) < 0) {
    close(fd);
    return -1;
  }
  std::string body;
  char buffer[4096];
  for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) > 0;) body.append(buffer, n);
  close(fd);
  std::istringstream lines(body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  }
  return -1;
}

static google::protobuf::Duration seconds(int64_t s) {
  google::protobuf::Duration d;
  d.set_seconds(s);
  return d;
}

// The next Hold event other than a heartbeat.
static v1::HoldResponse next(grpc::ClientReader<v1::HoldResponse>& stream) {
  v1::HoldResponse m;
  do {
    check(stream.Read(&m), "a Hold event");
  } while (m.has_heartbeat());
  return m;
}

int main(int argc, char** argv) {
  check(argc == 3, "usage: interop HOST:PORT METRICS_HOST:PORT");
  std::string address = argv[1], metrics = argv[2];
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto locks = v1::LockService::NewStub(channel);
  auto queues = v1::QueueService::NewStub(channel);

  // A lock round trip.
  v1::AcquireRequest acquire;
  acquire.set_name("cpp-lock");
  acquire.set_owner("cpp");
  *acquire.mutable_ttl() = seconds(30);
  v1::AcquireResponse won;
  {
    grpc::ClientContext ctx;
    ok(locks->Acquire(&ctx, acquire, &won), "acquire");
  }
  check(won.acquired() && won.fencing_token() > 0, "acquired");
  v1::DescribeRequest describe;
  describe.set_name("cpp-lock");
  describe.set_token(won.token());
  v1::DescribeResponse seen;
  {
    grpc::ClientContext ctx;
    ok(locks->Describe(&ctx, describe, &seen), "describe");
  }
  check(seen.held() && seen.held_by_token() && seen.info().owner() == "cpp", "described");
  v1::AcquireRequest other;
  other.set_name("cpp-lock");
  other.set_owner("other");
  v1::AcquireResponse again;
  {
    grpc::ClientContext ctx;
    ok(locks->Acquire(&ctx, other, &again), "acquire again");
  }
  check(!again.acquired() && again.holder().owner() == "cpp", "acquired twice");
  v1::ReleaseRequest release;
  release.set_name("cpp-lock");
  release.set_token(won.token());
  v1::ReleaseResponse released;
  {
    grpc::ClientContext ctx;
    ok(locks->Release(&ctx, release, &released), "release");
  }
  check(released.released(), "released");

  // Hold, then re-attach by token on a new stream: the same lease.
  v1::HoldRequest hold;
  hold.set_name("cpp-hold");
  hold.set_owner("cpp");
  *hold.mutable_ttl() = seconds(3);
  grpc::ClientContext first_ctx;
  auto first = locks->Hold(&first_ctx, hold);
  v1::HoldResponse acquired = next(*first);
  check(acquired.has_acquired(), "acquired by Hold");
  hold.set_token(acquired.acquired().token());
  grpc::ClientContext second_ctx;
  auto second = locks->Hold(&second_ctx, hold);
  v1::HoldResponse reattached = next(*second);
  check(reattached.has_acquired() && reattached.acquired().token() == acquired.acquired().token() &&
            reattached.acquired().fencing_token() == acquired.acquired().fencing_token(),
        "re-attached to the same lease");
  first_ctx.TryCancel();  // The replaced stream's end does not release the lease.
  first->Finish();
  wait_for("the replaced stream ended",
           [&] { return metric(metrics, "turnstile_streams_open{kind=\"hold\"}") == 1; });
  describe.set_name("cpp-hold");
  describe.set_token(acquired.acquired().token());
  {
    grpc::ClientContext ctx;
    ok(locks->Describe(&ctx, describe, &seen), "describe the hold");
  }
  check(seen.held_by_token(), "still held after the replaced stream's end");
  check(next(*second).has_renewed(), "renewed on the re-attached stream");
  second_ctx.TryCancel();  // Cancelling the stream that holds it releases at once.
  second->Finish();
  describe.clear_token();
  wait_for("released after the cancel", [&] {
    grpc::ClientContext ctx;
    v1::DescribeResponse now;
    return locks->Describe(&ctx, describe, &now).ok() && !now.held();
  });

  // Enqueue two tasks, Subscribe, Ack both.
  v1::EnqueueRequest enqueue;
  enqueue.set_queue("cpp-q");
  auto* a = enqueue.add_tasks();
  a->set_id("a");
  a->set_payload("one");
  auto* b = enqueue.add_tasks();
  b->set_id("b");
  b->set_payload("two");
  v1::EnqueueResponse queued;
  {
    grpc::ClientContext ctx;
    ok(queues->Enqueue(&ctx, enqueue, &queued), "enqueue");
  }
  check(queued.results(0).created() && queued.results(1).created(), "created");
  v1::SubscribeRequest subscribe;
  subscribe.set_queue("cpp-q");
  subscribe.set_max_in_flight(2);
  grpc::ClientContext stream_ctx;
  auto stream = queues->Subscribe(&stream_ctx, subscribe);
  std::vector<std::string> got;
  v1::AckRequest ack;
  ack.set_queue("cpp-q");
  while (got.size() < 2) {
    v1::SubscribeResponse m;
    check(stream->Read(&m), "a delivery");
    if (m.has_task()) {
      got.push_back(m.task().id() + " " + m.task().payload() + " " + std::to_string(m.task().attempt()));
      ack.add_receipts(m.task().receipt());
    }
  }
  std::sort(got.begin(), got.end());
  check(got == std::vector<std::string>{"a one 1", "b two 1"}, "delivered a and b");
  v1::AckResponse acked;
  {
    grpc::ClientContext ctx;
    ok(queues->Ack(&ctx, ack, &acked), "ack");
  }
  check(acked.acked_size() == 2 && acked.acked(0) && acked.acked(1), "acked both");
  stream_ctx.TryCancel();
  stream->Finish();
  v1::StatsRequest stats_request;
  stats_request.set_queue("cpp-q");
  v1::StatsResponse stats;
  {
    grpc::ClientContext ctx;
    ok(queues->Stats(&ctx, stats_request, &stats), "stats");
  }
  check(stats.ready() + stats.delayed() + stats.in_flight() + stats.dead() == 0, "nothing left");

  // Errors arrive as gRPC status codes.
  v1::EnqueueRequest bad;
  bad.add_tasks();
  v1::EnqueueResponse refused;
  grpc::ClientContext bad_ctx;
  grpc::Status status = queues->Enqueue(&bad_ctx, bad, &refused);
  check(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT &&
            status.error_message().find("queue") != std::string::npos,
        "a bad queue name: " + status.error_message());
  std::cout << "cpp interop ok" << std::endl;
  return 0;
}

// turnstile from Node: the .proto files loaded at run time (@grpc/proto-loader), then a
// lock round trip, Hold with a re-attach by token, Enqueue, Subscribe and Ack against a
// real server. Usage: node interop.js PROTO_DIR HOST:PORT METRICS_HOST:PORT. Exits
// non-zero on the first broken expectation.
'use strict';

const assert = require('node:assert/strict');
const path = require('node:path');
const http = require('node:http');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const [protoDir, address, metricsAddress] = process.argv.slice(2);
const definition = protoLoader.loadSync(
  ['turnstile/v1/lock.proto', 'turnstile/v1/queue.proto'].map((f) => path.join(protoDir, f)),
  { includeDirs: [protoDir], longs: String, defaults: true, oneofs: true },
);
const v1 = grpc.loadPackageDefinition(definition).turnstile.v1;
const locks = new v1.LockService(address, grpc.credentials.createInsecure());
const queues = new v1.QueueService(address, grpc.credentials.createInsecure());

const call = (client, method, request) =>
  new Promise((resolve, reject) =>
    client[method](request, (err, reply) => (err ? reject(err) : resolve(reply))));

// The next message of a stream other than a heartbeat; it must be `kind`.
function nextEvent(stream, kind) {
  return new Promise((resolve, reject) => {
    const onData = (message) => {
      if (message.event === 'heartbeat') return;
      stream.off('data', onData);
      stream.off('error', reject);
      if (message.event !== kind) reject(new Error(`expected ${kind}, got ${message.event}`));
      else resolve(message[kind]);
    };
    stream.on('data', onData);
    stream.on('error', reject);
  });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Checks `done` every 20 ms until it holds, failing after 10 s.
async function waitFor(what, done) {
  const deadline = Date.now() + 10000;
  while (!(await done())) {
    assert.ok(Date.now() < deadline, `not within 10 s: ${what}`);
    await sleep(20);
  }
}

// The value of `name` (with its labels) in a scrape of the server's /metrics.
const metric = (name) =>
  new Promise((resolve, reject) => {
    http
      .get(`http://${metricsAddress}/metrics`, (reply) => {
        let body = '';
        reply.on('data', (chunk) => (body += chunk));
        reply.on('end', () => {
          const line = body.split('\n').find((l) => l.startsWith(`${name} `));
          resolve(line === undefined ? undefined : Number(line.split(' ').pop()));
        });
      })
      .on('error', reject);
  });

async function main() {
  // A lock round trip.
  const won = await call(locks, 'Acquire', { name: 'js-lock', owner: 'js', ttl: { seconds: 30 } });
  assert.ok(won.acquired && BigInt(won.fencingToken) > 0n);
  const seen = await call(locks, 'Describe', { name: 'js-lock', token: won.token });
  assert.ok(seen.held && seen.heldByToken);
  assert.equal(seen.info.owner, 'js');
  const again = await call(locks, 'Acquire', { name: 'js-lock', owner: 'other' });
  assert.equal(again.acquired, false);
  assert.equal(again.holder.owner, 'js');
  assert.ok((await call(locks, 'Release', { name: 'js-lock', token: won.token })).released);

  // Hold, then re-attach by token on a new stream: the same lease.
  const first = locks.Hold({ name: 'js-hold', owner: 'js', ttl: { seconds: 3 } });
  first.on('error', () => {}); // Its cancel below ends it with CANCELLED.
  const acquired = await nextEvent(first, 'acquired');
  const second = locks.Hold({ name: 'js-hold', owner: 'js', ttl: { seconds: 3 }, token: acquired.token });
  second.on('error', () => {});
  const reattached = await nextEvent(second, 'acquired');
  assert.equal(reattached.token, acquired.token);
  assert.equal(reattached.fencingToken, acquired.fencingToken);
  first.cancel(); // The replaced stream's end does not release the lease.
  await waitFor('the replaced stream ended', async () => (await metric('turnstile_streams_open{kind="hold"}')) === 1);
  assert.ok((await call(locks, 'Describe', { name: 'js-hold', token: acquired.token })).heldByToken);
  await nextEvent(second, 'renewed');
  second.cancel(); // Cancelling the stream that holds it releases at once.
  await waitFor('released after the cancel', async () => !(await call(locks, 'Describe', { name: 'js-hold' })).held);

  // Enqueue two tasks, Subscribe, Ack both.
  const queued = await call(queues, 'Enqueue', {
    queue: 'js-q',
    tasks: [{ id: 'a', payload: Buffer.from('one') }, { id: 'b', payload: Buffer.from('two') }],
  });
  assert.deepEqual(queued.results.map((r) => r.created), [true, true]);
  const stream = queues.Subscribe({ queue: 'js-q', maxInFlight: 2 });
  stream.on('error', () => {});
  const tasks = [await nextEvent(stream, 'task'), await nextEvent(stream, 'task')];
  const got = tasks.map((t) => [t.id, t.payload.toString(), t.attempt]).sort();
  assert.deepEqual(got, [['a', 'one', 1], ['b', 'two', 1]]);
  const acked = await call(queues, 'Ack', { queue: 'js-q', receipts: tasks.map((t) => t.receipt) });
  assert.deepEqual(acked.acked, [true, true]);
  stream.cancel();
  const stats = await call(queues, 'Stats', { queue: 'js-q' });
  assert.deepEqual([stats.ready, stats.delayed, stats.inFlight, stats.dead], ['0', '0', '0', '0']);

  // Errors arrive as gRPC status codes.
  await assert.rejects(call(queues, 'Enqueue', { queue: '', tasks: [{}] }), (err) => {
    assert.equal(err.code, grpc.status.INVALID_ARGUMENT);
    assert.match(err.details, /queue/);
    return true;
  });
  console.log('node interop ok');
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);

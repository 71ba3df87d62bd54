// A partition processor over the embedded file log with its metrics served
// for Prometheus at /metrics (tidemark/prometheus, on prom-client).
//
//   npx tsx examples/metrics/main.ts [--port 9464] [--events 2000]
//   curl -s http://127.0.0.1:9464/metrics | grep '^tidemark_'
//
// It appends --events events, processes them with snapshots to a file
// snapshot store (every 500 events), then keeps running (appending a
// few events a second) until SIGINT or SIGTERM, when it closes. The
// partition's counters are at /metrics from the start, at 0 until something
// happens: tidemark_snapshots_total{outcome="failed"} 0 is what an alert on
// increase() needs to see the first failure. --port 0 takes a free port.
//
// Run from the repository's root: its tsconfig.json maps 'tidemark' to the
// source. Copied into an app, the same files import the installed package.
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { collectDefaultMetrics } from 'prom-client'
import { FsSnapshotStore, PartitionProcessor, openFileLog, valueState } from 'tidemark'
import { createPrometheusMetrics } from 'tidemark/prometheus'
import { serveMetrics } from './server.js'

const { values } = parseArgs({ options: { port: { type: 'string', default: '9464' }, events: { type: 'string', default: '2000' } } })
const port = Number(values.port)
const events = Number(values.events)
if (!Number.isInteger(port) || port < 0 || port > 65535) throw new RangeError(`--port must be a port number, got ${values.port}`)
if (!Number.isInteger(events) || events < 1) throw new RangeError(`--events must be a positive integer, got ${values.events}`)

// Subscribe before the processor is made, so that its series start at 0 and its restore and replay are measured too.
const metrics = createPrometheusMetrics()
// The process's own figures (CPU, memory, event loop lag) beside Tidemark's.
collectDefaultMetrics({ register: metrics.registry })
const server = await serveMetrics(metrics, { port })
console.log(`metrics at ${server.url}`)

const dir = await mkdtemp(join(tmpdir(), 'tidemark-metrics-example-'))
const log = await openFileLog(join(dir, 'log'), { sync: false })
for (let i = 0; i < events; i++) await log.append(Buffer.from(JSON.stringify({ key: `k${i % 1000}` })))
const counts = valueState<number>('counts')
const processor = new PartitionProcessor<{ key: string }>({
  job: 'metrics-example', topic: 'events', partition: 0, log, path: join(dir, 'store'), states: [counts],
  handler: (tx, event) => tx.value(counts).put(event.key, (tx.value(counts).getSync(event.key) ?? 0) + 1),
  snapshots: { store: new FsSnapshotStore({ root: join(dir, 'snapshots') }), schedule: { everyEvents: 500 }, onClose: true },
})
await processor.start()
console.log('processing partition 0 of job metrics-example; SIGINT or SIGTERM stops it')
const stop = new AbortController()
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => stop.abort())
const producer = setInterval(() => void log.append(Buffer.from(JSON.stringify({ key: 'live' }))), 200)
try {
  await processor.run(stop.signal)
} finally {
  clearInterval(producer)
  await processor.close()
  await log.close()
  metrics.close()
  await server.close()
  await rm(dir, { recursive: true, force: true })
}

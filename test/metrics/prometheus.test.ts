import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { describe, expect, it, onTestFinished } from 'vitest'
import { createPrometheusMetrics } from '../../connectors/prometheus/index.js'
import { serveMetrics } from '../../examples/metrics/server.js'
import {
  FsSnapshotStore, OWNERSHIP_EVENTS, PartitionProcessor, RESTORE_SOURCES, SNAPSHOT_FAILURE_CODES, metricsChannels, openFileLog, type FileLog,
} from '../../src/index.js'
import { addSale, saleAt, TOPIC, totals, type Sale } from '../runtime/fixtures/totals.js'
import { tempDir } from '../helpers/tmp.js'

/** The series docs/metrics.md documents, from its table. */
function documentedSeries(): Array<{ name: string; type: string; labels: string[] }> {
  const doc = readFileSync(new URL('../../docs/metrics.md', import.meta.url), 'utf8')
  const table = doc.slice(doc.indexOf('<!-- metrics:start -->'), doc.indexOf('<!-- metrics:end -->'))
  return [...table.matchAll(/^\| `(tidemark_[a-z_]+)` \| (\w+) \| ([^|]+) \|/gm)].map((m) => ({ name: m[1]!, type: m[2]!, labels: m[3]!.split(',').map((l) => l.trim()) }))
}

interface Sample { name: string; labels: Record<string, string>; value: number }

function parse(text: string): { types: Map<string, string>; samples: Sample[] } {
  const types = new Map<string, string>()
  const samples: Sample[] = []
  for (const line of text.split('\n')) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line)
    if (type !== null) types.set(type[1]!, type[2]!)
    const sample = /^([a-z_]+)(?:\{(.*)\})? (\S+)$/.exec(line)
    if (sample === null) continue
    const labels = Object.fromEntries([...(sample[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1]!, m[2]!]))
    samples.push({ name: sample[1]!, labels, value: Number(sample[3]) })
  }
  return { types, samples }
}

function value(samples: Sample[], name: string, labels: Record<string, string> = {}): number | undefined {
  return samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value
}

async function filledLog(dir: string, events: number): Promise<FileLog> {
  const log = await openFileLog(dir, { sync: false })
  for (let i = 0; i < events; i++) await log.append(Buffer.from(JSON.stringify(saleAt(i))))
  return log
}

function processor(path: string, log: FileLog, store: FsSnapshotStore): PartitionProcessor<Sale> {
  return new PartitionProcessor<Sale>({
    job: 'metrics-job', topic: TOPIC, partition: 0, log, path, states: [totals], handler: addSale,
    batchSize: 100, snapshots: { store, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } },
  })
}

describe('metrics: the Prometheus adapter', () => {
  it('a processor runs, a new owner restores and replays; /metrics scraped over HTTP has every documented series with plausible values', async () => {
    const dir = tempDir()
    const metrics = createPrometheusMetrics()
    onTestFinished(() => metrics.close())
    const server = await serveMetrics(metrics)
    onTestFinished(() => server.close())
    const log = await filledLog(join(dir, 'log'), 1000)
    onTestFinished(() => log.close())
    const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })

    const first = processor(join(dir, 'a'), log, snapshots)
    await first.start()
    expect(await first.catchUp({ end: 600n })).toBe(600)
    const snap = await first.snapshot()
    expect(await first.catchUp()).toBe(400)
    await first.close()
    const second = processor(join(dir, 'b'), log, snapshots)
    expect(await second.start()).toMatchObject({ source: 'snapshot', snapshot: snap!.id })
    expect(await second.catchUp()).toBe(400)
    await second.close()
    // What the outbox publishes (src/outputs), through the same channel.
    metricsChannels.outbox.publish({ job: 'metrics-job', topic: TOPIC, partition: 0, depth: 3 })

    const response = await fetch(server.url)
    expect(response.status).toBe(200)
    expect(response.headers.get('content-type')).toMatch(/^text\/plain/)
    const { types, samples } = parse(await response.text())

    const documented = documentedSeries()
    expect(documented.length).toBeGreaterThanOrEqual(20)
    for (const series of documented) expect(types.get(series.name), series.name).toBe(series.type)
    // Every sample's labels are the documented ones (histogram buckets add `le`).
    for (const sample of samples) {
      const series = documented.find((d) => sample.name === d.name || sample.name.replace(/_(bucket|sum|count)$/, '') === d.name)
      expect(series, sample.name).toBeDefined()
      expect(Object.keys(sample.labels).filter((l) => l !== 'le').sort(), sample.name).toEqual([...series!.labels].sort())
    }

    const p = { job_name: 'metrics-job', topic: TOPIC, partition: '0' }
    const s = { job_name: 'metrics-job', partition: '0' }
    // First: 6 + 4 batches of 100; second: the replay of 400 (replayBatchSize is batchSize when that is set).
    expect(value(samples, 'tidemark_commits_total', p)).toBe(14)
    expect(value(samples, 'tidemark_committed_events_total', p)).toBe(1400)
    expect(value(samples, 'tidemark_committed_bytes_total', p)).toBeGreaterThan(1400 * 20)
    expect(value(samples, 'tidemark_commit_batch_events_count', p)).toBe(14)
    expect(value(samples, 'tidemark_commit_batch_events_sum', p)).toBe(1400)
    expect(value(samples, 'tidemark_commit_batch_events_bucket', { ...p, le: '100' })).toBe(14)
    const commitSeconds = value(samples, 'tidemark_commit_duration_seconds_sum', p)!
    expect(commitSeconds).toBeGreaterThan(0)
    expect(commitSeconds).toBeLessThan(14 * 5)
    expect(value(samples, 'tidemark_position', p)).toBe(999)
    expect(value(samples, 'tidemark_lag_events', p)).toBe(0)

    expect(value(samples, 'tidemark_snapshots_total', { ...s, outcome: 'ok' })).toBe(1)
    expect(value(samples, 'tidemark_snapshot_duration_seconds_count', s)).toBe(1)
    expect(value(samples, 'tidemark_snapshot_stall_seconds_count', s)).toBe(1)
    expect(value(samples, 'tidemark_snapshot_stall_seconds_sum', s)).toBeLessThanOrEqual(value(samples, 'tidemark_snapshot_duration_seconds_sum', s)!)
    expect(value(samples, 'tidemark_snapshot_uploaded_bytes_total', s)).toBe(snap!.bytesUploaded)
    expect(value(samples, 'tidemark_snapshot_state_bytes', s)).toBe(snap!.bytesTotal)
    expect(value(samples, 'tidemark_snapshot_offset', s)).toBe(599)

    expect(value(samples, 'tidemark_restores_total', { ...s, source: 'empty' })).toBe(1)
    expect(value(samples, 'tidemark_restores_total', { ...s, source: 'snapshot' })).toBe(1)
    const downloaded = value(samples, 'tidemark_restore_downloaded_bytes', s)!
    expect(downloaded).toBeGreaterThan(0)
    expect(downloaded).toBe(value(samples, 'tidemark_restore_size_bytes', s))
    expect(value(samples, 'tidemark_restore_duration_seconds_count', s)).toBe(2)
    expect(value(samples, 'tidemark_restore_duration_seconds_sum', s)).toBeGreaterThan(0)
    expect(value(samples, 'tidemark_replay_events', p)).toBe(400)
    expect(value(samples, 'tidemark_replay_size_events', p)).toBe(400)
    // Nothing failed, and the series say so.
    expect(value(samples, 'tidemark_snapshots_total', { ...s, outcome: 'failed' })).toBe(0)
    expect(value(samples, 'tidemark_restores_total', { ...s, source: 'local' })).toBe(0)

    // Each owner's claim; the first released it on close, so the second took it at once.
    expect(value(samples, 'tidemark_ownership_events_total', { ...s, event: 'acquired' })).toBe(2)
    expect(value(samples, 'tidemark_outbox_depth', p)).toBe(3)
    // The state size of the partition's store, measured at each start and snapshot; no soft limit was set.
    expect(value(samples, 'tidemark_state_bytes', p)).toBeGreaterThan(0)
    expect(value(samples, 'tidemark_state_limit_bytes', p)).toBeUndefined()
  })

  it('a fresh process: /metrics of examples/metrics has the partition\'s failure series at 0 before anything failed', async () => {
    const root = join(import.meta.dirname, '../..')
    // From the repository's root, where tsx finds the tsconfig that maps 'tidemark' to the source.
    const child = spawn(process.execPath, ['--import', 'tsx', 'examples/metrics/main.ts', '--port', '0', '--events', '10'], { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] })
    onTestFinished(() => { child.kill('SIGKILL') })
    const exited = once(child, 'exit')
    let url: string | undefined
    let text: string | undefined
    for await (const line of createInterface({ input: child.stdout })) {
      url ??= /^metrics at (\S+)$/.exec(line)?.[1]
      if (line.startsWith('processing ')) {
        text = await (await fetch(url!)).text()
        child.kill('SIGTERM')
      }
    }
    expect((await exited)[0]).toBe(0)
    const { samples } = parse(text!)
    const s = { job_name: 'metrics-example', partition: '0' }
    expect(value(samples, 'tidemark_snapshots_total', { ...s, outcome: 'failed' })).toBe(0)
    expect(value(samples, 'tidemark_snapshots_total', { ...s, outcome: 'ok' })).toBe(0)
    for (const code of SNAPSHOT_FAILURE_CODES) expect(value(samples, 'tidemark_snapshot_failures_total', { ...s, code }), code).toBe(0)
    expect(value(samples, 'tidemark_ownership_events_total', { ...s, event: 'lost' })).toBe(0)
    expect(value(samples, 'tidemark_ownership_events_total', { ...s, event: 'fenced' })).toBe(0)
    expect(value(samples, 'tidemark_snapshot_duration_seconds_count', s)).toBe(0)
    // prom-client's process metrics share the registry.
    expect(value(samples, 'process_cpu_seconds_total')).toBeGreaterThan(0)
  })

  it('a partition\'s counters and histograms start at 0 when its processor is made, and at its first message for an adapter made later', async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 10)
    onTestFinished(() => log.close())
    const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    const early = createPrometheusMetrics()
    onTestFinished(() => early.close())
    const made = processor(join(dir, 'a'), log, snapshots)
    const p = { job_name: 'metrics-job', topic: TOPIC, partition: '0' }
    const s = { job_name: 'metrics-job', partition: '0' }
    const zeros = (samples: Sample[]): void => {
      for (const code of SNAPSHOT_FAILURE_CODES) expect(value(samples, 'tidemark_snapshot_failures_total', { ...s, code }), code).toBe(0)
      for (const event of OWNERSHIP_EVENTS.filter((e) => e !== 'acquired')) expect(value(samples, 'tidemark_ownership_events_total', { ...s, event }), event).toBe(0)
      expect(value(samples, 'tidemark_snapshots_total', { ...s, outcome: 'failed' })).toBe(0)
      expect(value(samples, 'tidemark_snapshot_uploaded_bytes_total', s)).toBe(0)
      expect(value(samples, 'tidemark_snapshot_stall_seconds_bucket', { ...s, le: '+Inf' })).toBe(0)
    }
    // Made, not started: nothing happened, and every known series is there at 0.
    let { samples } = parse(await early.metrics())
    zeros(samples)
    for (const source of RESTORE_SOURCES) expect(value(samples, 'tidemark_restores_total', { ...s, source }), source).toBe(0)
    expect(value(samples, 'tidemark_commits_total', p)).toBe(0)
    expect(value(samples, 'tidemark_commit_duration_seconds_count', p)).toBe(0)
    expect(value(samples, 'tidemark_restore_duration_seconds_count', s)).toBe(0)
    // Gauges wait for a value: a position of 0 would say offset 0 is committed.
    expect(value(samples, 'tidemark_position', p)).toBeUndefined()

    // An adapter made after the processor: the restore at start starts the
    // snapshot series, the first commit the partition's, without losing either.
    const late = createPrometheusMetrics()
    onTestFinished(() => late.close())
    await made.start()
    expect(await made.catchUp()).toBe(10)
    await made.close()
    for (const metrics of [early, late]) {
      ({ samples } = parse(await metrics.metrics()))
      zeros(samples)
      expect(value(samples, 'tidemark_restores_total', { ...s, source: 'empty' })).toBe(1)
      expect(value(samples, 'tidemark_restores_total', { ...s, source: 'snapshot' })).toBe(0)
      expect(value(samples, 'tidemark_restore_duration_seconds_count', s)).toBe(1)
      expect(value(samples, 'tidemark_commits_total', p)).toBe(1)
      expect(value(samples, 'tidemark_commit_duration_seconds_count', p)).toBe(1)
      expect(value(samples, 'tidemark_ownership_events_total', { ...s, event: 'acquired' })).toBe(1)
    }
  })

  it('close() unsubscribes from every channel, so that publishers build nothing again', () => {
    const before = Object.values(metricsChannels).map((c) => c.hasSubscribers)
    const metrics = createPrometheusMetrics()
    expect(Object.values(metricsChannels).every((c) => c.hasSubscribers)).toBe(true)
    metrics.close()
    expect(Object.values(metricsChannels).map((c) => c.hasSubscribers)).toEqual(before)
  })

  it('refuses options that are not what they say, naming them', () => {
    expect(() => createPrometheusMetrics({ prefix: 'bad prefix' })).toThrow(/options\.prefix/)
    expect(() => createPrometheusMetrics({ registry: {} as never })).toThrow(/options\.registry/)
    expect(() => createPrometheusMetrics({ buckets: { commitSeconds: [] } })).toThrow(/options\.buckets\.commitSeconds/)
  })
})

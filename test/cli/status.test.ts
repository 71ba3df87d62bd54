// `tidemark status`: claims, member leases and snapshots as the real runtimes
// write them, read while they run and after they stopped.
import { hostname } from 'node:os'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { describe, expect, it, onTestFinished } from 'vitest'
import { StatefulConsumer } from '../../connectors/kafka/index.js'
import { acquireClaim, FsSnapshotStore, MemberLease, openFileLog, PartitionProcessor, valueState } from '../../src/index.js'
import type { JobStatus } from '../../src/cli/job-status.js'
import { committedThrough, consumerOptions, groupFixture, produceWords, type WordEvent } from '../kafka-consumer/fixture.js'
import { tempDir } from '../helpers/tmp.js'
import { tidemark } from './helpers.js'

const counts = valueState<number>('counts')
const owner = `${hostname()}:${process.pid}`

async function status(url: string, job: string): Promise<{ report: JobStatus; text: string }> {
  const json = await tidemark('status', url, '--job', job, '--json')
  expect(json, json.stderr).toMatchObject({ code: 0, stderr: '' })
  const text = await tidemark('status', url, '--job', job)
  expect(text).toMatchObject({ code: 0, stderr: '' })
  return { report: JSON.parse(json.stdout) as JobStatus, text: text.stdout }
}

/** The text table's row of a partition (or member), split into its columns. */
function row(text: string, first: string): string[] {
  const line = text.split('\n').find((l) => l.startsWith(`${first} `))
  expect(line, `a row for ${first} in\n${text}`).toBeDefined()
  return line!.split(/ {2,}/)
}

describe('tidemark status', () => {
  it('processors holding claims by member leases: owner, member, epoch, lease left, newest snapshot, kept snapshots; then released', async () => {
    const root = join(tempDir(), 'snapshots')
    const store = new FsSnapshotStore({ root })
    onTestFinished(() => store.close())
    const url = pathToFileURL(root).href
    const lease = await MemberLease.start({ store, job: 'orders', leaseMs: 60_000 })
    onTestFinished(() => lease.release())
    const log = await openFileLog(join(tempDir(), 'log'))
    onTestFinished(() => log.close())
    for (let i = 0; i < 10; i++) await log.append(Buffer.from(JSON.stringify({ n: 1 })))
    const dir = tempDir()
    const processors = [0, 1].map((partition) => new PartitionProcessor<{ n: number }>({
      job: 'orders', log, topic: 'src', partition, path: join(dir, `p${partition}`), states: [counts],
      handler: (tx, event) => { tx.value(counts).put('n', (tx.value(counts).getSync('n') ?? 0) + event.n) },
      snapshots: { store, schedule: { intervalMs: 0, everyEvents: 0 } },
      ownership: { memberLease: lease },
    }))
    for (const p of processors) {
      await p.start()
      await p.catchUp()
      await p.snapshot()
    }
    for (let i = 0; i < 2; i++) await log.append(Buffer.from(JSON.stringify({ n: 1 })))
    await processors[0]!.catchUp()
    await processors[0]!.snapshot()
    // A third partition, claimed by a process whose member lease ran out a minute ago (by its clock).
    const stale = await MemberLease.start({ store, job: 'orders', leaseMs: 30_000, owner: 'gone:1', clock: () => Date.now() - 90_000 })
    await acquireClaim({ store, job: 'orders', partition: 2, memberLease: stale, owner: 'gone:1' })

    const before = Date.now()
    const { report, text } = await status(url, 'orders')
    expect(report.job).toBe('orders')
    expect(report.partitions.map((p) => p.partition)).toEqual(['0', '1', '2'])
    const [p0, p1, p2] = report.partitions
    for (const p of [p0!, p1!]) {
      expect(p.owner).toMatchObject({ state: 'held', epoch: 1, owner: { name: owner, host: hostname(), pid: process.pid }, member: lease.id, leaseUntil: lease.leaseUntil })
      expect(p.owner!.leaseLeftMs).toBeGreaterThan(0)
      expect(p.owner!.leaseLeftMs).toBeLessThanOrEqual(60_000)
      expect(p.newest).toMatchObject({ positions: [{ topic: 'src', partition: Number(p.partition), offset: p === p0 ? '11' : '9' }], stateBytes: expect.any(Number), full: expect.any(Boolean) })
      expect(p.newest!.ageMs).toBeGreaterThanOrEqual(0)
      expect(p.newest!.ageMs).toBeLessThanOrEqual(Date.now() - before + 60_000)
    }
    expect([p0!.snapshots, p1!.snapshots]).toEqual([2, 1])
    expect(p2).toMatchObject({ partition: '2', owner: { state: 'expired', member: stale.id, owner: { name: 'gone:1' } }, newest: null, snapshots: 0 })
    expect(p2!.owner!.leaseLeftMs).toBeLessThan(0)
    expect(report.members).toEqual(expect.arrayContaining([
      expect.objectContaining({ id: lease.id, state: 'held', owner: { name: owner, host: hostname(), pid: process.pid }, leaseMs: 60_000, partitions: ['0', '1'] }),
      expect.objectContaining({ id: stale.id, state: 'expired', owner: expect.objectContaining({ name: 'gone:1' }), partitions: ['2'] }),
    ]))
    expect(report.members).toHaveLength(2)
    // The member leases sit beside the partitions, and are none.
    expect((JSON.parse((await tidemark('jobs', url, '--json')).stdout) as Array<{ partition: string }>).map((h) => h.partition)).toEqual(['0', '1', '2'])

    expect(text).toMatch(/^job orders: 3 partitions \(2 held\), 2 member leases\n/)
    expect(text).toMatch(/^partition +owner +member +epoch +lease +newest +positions +age +state bytes +snapshots$/m)
    const r0 = row(text, '0')
    expect(r0.slice(0, 4)).toEqual(['0', owner, lease.id, '1'])
    expect(r0[4]).toMatch(/^held, [\d.]+ (s|min) left$/)
    expect(r0[5]).toBe(p0!.newest!.id)
    expect(r0[6]).toBe('src/0@11')
    expect(r0[7]).toMatch(/^\d+(\.\d)? (ms|s|min)$/)
    expect(r0[9]).toBe('2')
    expect(row(text, '2').slice(0, 9)).toEqual(['2', 'gone:1', stale.id, '1', expect.stringMatching(/^expired [\d.]+ (s|min) ago$/), '-', '-', '-', '-'])
    expect(row(text, lease.id)).toEqual([lease.id, owner, expect.stringMatching(/^held, [\d.]+ (s|min) left$/), '0, 1'])
    expect(row(text, stale.id)).toEqual([stale.id, 'gone:1', expect.stringMatching(/^expired [\d.]+ (s|min) ago$/), '2'])

    // Closed processors release their claims; a released member lease says so.
    for (const p of processors) await p.close()
    await lease.release()
    const after = await status(url, 'orders')
    expect(after.report.partitions.slice(0, 2).map((p) => p.owner)).toMatchObject([{ state: 'released', epoch: 1, leaseUntil: 0 }, { state: 'released', epoch: 1, leaseUntil: 0 }])
    expect(after.report.members.find((m) => m.id === lease.id)).toMatchObject({ state: 'released', leaseUntil: 0, partitions: [] })
    expect(row(after.text, '1')[4]).toBe('released')
    expect(row(after.text, lease.id).slice(2)).toEqual(['released', '-'])
  })

  it('a running StatefulConsumer: each partition held (no lease of its own), with its snapshots', async () => {
    const f = await groupFixture('status')
    const produced = await produceWords(f.producer, f.topic, [0, 1, 2, 3], 20, 10)
    const consumer = new StatefulConsumer<WordEvent>(consumerOptions({ brokers: f.brokers, job: f.job, topics: [f.topic], stateDir: tempDir() }, {
      snapshots: { store: f.store, schedule: { intervalMs: 0, everyEvents: 5 } },
    }))
    onTestFinished(async () => { await consumer.close() })
    const snapshotted = new Set<string>()
    const allSnapshotted = new Promise<void>((resolve) => consumer.on('snapshot', (e: { topic: string; partition: number }) => {
      snapshotted.add(`${e.topic}-${e.partition}`)
      if (snapshotted.size === 4) resolve()
    }))
    const done = committedThrough([consumer], produced)
    await consumer.start()
    await done
    await allSnapshotted

    const url = pathToFileURL(f.snapshotRoot).href
    const { report, text } = await status(url, f.job)
    expect(report.partitions.map((p) => p.partition)).toEqual([0, 1, 2, 3].map((p) => `${f.topic}-${p}`))
    for (const p of report.partitions) {
      expect(p.owner, p.partition).toMatchObject({ state: 'held', owner: { name: owner, pid: process.pid }, leaseUntil: null, leaseLeftMs: null })
      expect(p.owner!.epoch).toBeGreaterThanOrEqual(1)
      expect(p.newest, p.partition).toMatchObject({ positions: [{ topic: f.topic, partition: Number(p.partition.slice(f.topic.length + 1)) }] })
      expect(p.snapshots).toBeGreaterThanOrEqual(1)
    }
    expect(report.members).toEqual([])
    const r1 = row(text, `${f.topic}-1`)
    expect(r1.slice(0, 3)).toEqual([`${f.topic}-1`, owner, '-'])
    expect(r1[4]).toBe('held, no lease')
    expect(r1[6]).toMatch(new RegExp(`^${f.topic}/1@\\d+$`))

    // What status names is what --partition takes.
    expect(await tidemark('snapshots', 'list', url, '--job', f.job, '--partition', report.partitions[1]!.partition)).toMatchObject({ code: 0, stderr: '' })
  })

  it('a job the store does not hold, a bad --job, a missing one, a store that is not there', async () => {
    const root = tempDir()
    const url = pathToFileURL(root).href
    const none = await tidemark('status', url, '--job', 'none', '--json')
    expect(none).toMatchObject({ code: 0, stderr: `tidemark: ${url} holds nothing of job none; \`tidemark jobs ${url}\` lists its jobs\n` })
    expect(JSON.parse(none.stdout)).toEqual({ job: 'none', at: expect.any(Number), partitions: [], members: [] })
    expect(await tidemark('status', url, '--job', 'a/b')).toMatchObject({ code: 2, stdout: '', stderr: expect.stringMatching(/^tidemark: --job "a\/b": [^\n]+\nusage:\n {2}tidemark status /) })
    expect(await tidemark('status', url)).toMatchObject({ code: 2, stdout: '', stderr: expect.stringMatching(/^tidemark: missing --job\nusage:\n/) })
    expect(await tidemark('status', join(root, 'missing'), '--job', 'j')).toMatchObject({ code: 1, stdout: '', stderr: expect.stringMatching(/^tidemark: TIDEMARK_DFS_STORE_NOT_FOUND: /) })
  })
})

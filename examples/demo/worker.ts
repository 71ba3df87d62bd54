/**
 * One owner of the demo's partition, in its own process: restores the state
 * (local store, else the newest snapshot), replays and processes the log to
 * its end, snapshotting every `snapshotEvery` events. Reports each step as one JSON line.
 */
import { PartitionProcessor } from '../../src/index.js'
import type { DemoEvent } from './events.js'
import { addToTotal, JOB, TOPIC, totals } from './job.js'
import { openSnapshots, openSource, type DemoTarget } from './source.js'

const [targetJson, storePath, takeover = 'if-expired'] = process.argv.slice(2) as [string, string, ('if-expired' | 'force')?]
const target = JSON.parse(targetJson) as DemoTarget
const say = (msg: Record<string, unknown>): void => {
  process.stdout.write(`${JSON.stringify(msg, (_k, v) => (typeof v === 'bigint' ? Number(v) : v))}\n`)
}

const log = await openSource(target)
const snapshots = await openSnapshots(target)
const processor = new PartitionProcessor<DemoEvent>({
  job: JOB, topic: TOPIC, partition: 0, log, path: storePath, states: [totals], handler: addToTotal,
  batchSize: 1000,
  snapshots: { store: snapshots, retain: 3, schedule: { intervalMs: 0, everyEvents: target.snapshotEvery, everyBytes: 0 } },
  // 'force' when main.ts, the supervisor, knows the previous owner is dead:
  // a SIGKILLed owner's lease runs on for up to 30 s.
  ownership: { takeover },
})
processor.on('commit', ({ offset, events }) => say({ type: 'commit', offset, events }))
processor.on('snapshot', (s) => say({ type: 'snapshot', id: s.id, full: s.full, fullReason: s.fullReason, bytesUploaded: s.bytesUploaded, bytesTotal: s.bytesTotal, stallMs: s.stallMs, offset: s.positions[0]?.offset }))
processor.on('snapshot-failed', (e) => say({ type: 'snapshot-failed', message: (e as Error).message }))
processor.on('progress', (p) => { if (p.final) say({ type: 'progress', ...p }) })
const started = await processor.start()
say({ type: 'started', epoch: started.epoch, source: started.source, snapshot: started.snapshot, offset: started.offset, bytesDownloaded: started.bytesDownloaded, restoreMs: started.restoreMs, skipped: started.skipped.map((s) => s.message) })
const replayed = await processor.catchUp()
say({ type: 'caught-up', events: replayed, offset: processor.offset })
await processor.close()
await log.close()
await snapshots.close()
say({ type: 'done' })

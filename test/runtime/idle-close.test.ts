import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { expect, it } from 'vitest'
import { FsSnapshotStore, openFileLog, PartitionProcessor, PartitionStore } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { addSale, fold, readTotals, saleAt, TOPIC, totals, type Sale } from './fixtures/totals.js'

type Line = Record<string, unknown> & { type: string }

/** Runs fixtures/idle-owner.ts until it reports `until`, SIGKILLs it, and returns what it reported. */
async function runAndKill(root: string, mode: 'idle' | 'wake', more: number, until: string): Promise<Line[]> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'fixtures', 'idle-owner.ts'), root, mode, String(more)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_code, signal) => resolve(signal)))
  const lines: Line[] = []
  for await (const text of createInterface({ input: child.stdout })) {
    const line = JSON.parse(text) as Line
    lines.push(line)
    if (line.type === until) {
      child.kill('SIGKILL')
      break
    }
  }
  expect(await exited).toBe('SIGKILL')
  return lines
}

async function storeAt(path: string): Promise<{ offset: bigint | undefined; totals: Map<string, number> }> {
  const store = await PartitionStore.open({ path, states: [totals], create: false })
  try {
    return { offset: store.position(TOPIC, 0), totals: await readTotals(store) }
  } finally {
    await store.close()
  }
}

it('a store closed for being idle reopens on its next event with nothing lost, SIGKILLed while closed before and after', async () => {
  const root = tempDir()
  const log = await openFileLog(join(root, 'log'), { sync: false })
  for (let i = 0; i < 1000; i++) await log.append(Buffer.from(JSON.stringify(saleAt(i))))
  await log.close()

  // Killed while its store is closed for being idle.
  const first = await runAndKill(root, 'idle', 0, 'idle')
  expect(first.at(-1)).toEqual({ type: 'idle', idle: true, offset: '999' })
  expect(await storeAt(join(root, 'store'))).toEqual({ offset: 999n, totals: fold(999) })

  // Restarted on that store: closed while idle, snapshotted while closed,
  // reopened by the next events, closed again, killed.
  const second = await runAndKill(root, 'wake', 250, 'idle-again')
  expect(second).toEqual([
    { type: 'idle', idle: true, offset: '999' },
    { type: 'snapshot', offset: '999' },
    { type: 'woke', applied: 250, idle: false, offset: '1249' },
    { type: 'idle-again', idle: true, offset: '1249' },
  ])
  expect(await storeAt(join(root, 'store'))).toEqual({ offset: 1249n, totals: fold(1249) })

  // The snapshot taken while the store was closed restores to what it held.
  const reopened = await openFileLog(join(root, 'log'), { sync: false })
  const restored = new PartitionProcessor<Sale>({
    job: 'idle-job', topic: TOPIC, partition: 0, log: reopened, path: join(root, 'restored'), states: [totals], handler: addSale,
    snapshots: { store: new FsSnapshotStore({ root: join(root, 'snapshots') }), graceMs: 0, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } },
    ownership: { takeover: 'force' },
  })
  try {
    const started = await restored.start()
    expect(started).toMatchObject({ source: 'snapshot', offset: 999n })
    expect(await readTotals(restored.store)).toEqual(fold(999))
  } finally {
    await restored.close()
    await reopened.close()
  }
}, 120_000)

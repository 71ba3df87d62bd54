// The SIGKILL loop shared by kill-file-log.torture.ts and kill-kafka.torture.ts:
// owners of one partition are started one after another, each killed by a
// kill point the parent picks (seeded), in place or on a new directory (a
// partition that moved); after every restart the state the owner starts from
// must equal an independent fold of the log up to the store's position.
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { Kafka, logLevel } from 'kafkajs'
import { expect } from 'vitest'
import { openFileLog } from '../../src/index.js'
import { kafkaService, s3Service } from '../helpers/services.js'
import { randomName } from '../helpers/tmp.js'
import { fold, saleAt } from '../runtime/fixtures/totals.js'
import { count, makeBucket, type Rng } from './common.js'
import type { KillHow, KillPoint, OwnerArgs } from './fixtures/owner.js'

const OWNER = join(import.meta.dirname, 'fixtures', 'owner.ts')
export const POINTS: readonly KillPoint[] = ['commit', 'upload', 'manifest', 'gc', 'restore-get', 'replay']
const HOWS: readonly KillHow[] = ['before', 'during', 'after']

export interface KillFigures {
  kills: number
  restarts: number
  unreached: number
  killPoints: Record<string, number>
  killCombos: Record<string, number>
}

interface Line {
  type: string
  offset?: string | null
  totals?: Record<string, number>
  source?: string
  point?: string
  how?: string
  phase?: string
  detail?: string
  code?: string
  message?: string
}

/** Appends events [from, to) to the log the owners read. */
type Appender = { append(from: number, to: number): Promise<void>; close(): Promise<void>; args: OwnerArgs['log'] }

async function fileLog(root: string): Promise<Appender> {
  const path = join(root, 'log')
  return {
    args: { kind: 'file', path },
    async append(from, to) {
      const log = await openFileLog(path, { sync: false })
      try {
        for (let i = from; i < to; i += 1000) {
          await Promise.all(Array.from({ length: Math.min(1000, to - i) }, (_, j) => log.append(Buffer.from(JSON.stringify(saleAt(i + j))))))
        }
      } finally {
        await log.close()
      }
    },
    async close() {},
  }
}

async function kafkaLog(): Promise<Appender> {
  const topic = randomName('torture')
  const { brokers } = kafkaService()
  const kafka = new Kafka({ brokers, clientId: 'torture', logLevel: logLevel.NOTHING })
  const producer = kafka.producer()
  await producer.connect()
  return {
    args: { kind: 'kafka', brokers, topic },
    async append(from, to) {
      for (let i = from; i < to; i += 1000) {
        const messages = Array.from({ length: Math.min(1000, to - i) }, (_, j) => ({ partition: 0, value: Buffer.from(JSON.stringify(saleAt(i + j))) }))
        await producer.send({ topic, acks: -1, messages })
      }
    },
    close: () => producer.disconnect(),
  }
}

function asObject(map: Map<string, number>): Record<string, number> {
  return Object.fromEntries([...map].sort(([a], [b]) => (a < b ? -1 : 1)))
}

function sorted(totals: Record<string, number> | undefined): Record<string, number> {
  return Object.fromEntries(Object.entries(totals ?? {}).sort(([a], [b]) => (a < b ? -1 : 1)))
}

/**
 * Runs `kills` SIGKILLs (bounded by `budgetMs` and by three attempts a kill)
 * against one combination of log and snapshot store, then a last owner on
 * a new directory that must finish with the fold of the whole log.
 */
export async function killLoop(options: {
  root: string
  log: 'file' | 'kafka'
  store: 'fs' | 's3'
  kills: number
  budgetMs: number
  rng: Rng
  figures: KillFigures
}): Promise<void> {
  const { root, rng, figures } = options
  const combo = `${options.log}+${options.store}`
  const appender = options.log === 'file' ? await fileLog(root) : await kafkaLog()
  const bucket = options.store === 's3' ? await makeBucket('torture-kill') : undefined
  const s3 = s3Service()
  const snapshots: OwnerArgs['snapshots'] = bucket === undefined
    ? { kind: 'fs', root: join(root, 'snapshots') }
    : { kind: 's3', endpoint: s3.endpoint, region: s3.region, accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey, bucket: bucket.bucket, prefix: 'jobs' }
  const job = 'torture-job'
  let appended = 0
  let processed = -1n
  let snapshotOffset = -1n
  let generation = 0
  const lastCommitted = new Map<string, bigint>()
  const deadline = performance.now() + options.budgetMs

  async function owner(path: string, kill: OwnerArgs['kill'], label: string): Promise<{ killed: boolean; done: Line | undefined }> {
    const args: OwnerArgs = { job, path, replayUntil: String(processed), log: appender.args, snapshots, ...(kill === undefined ? {} : { kill }) }
    const child = spawn(process.execPath, ['--import', 'tsx', OWNER, JSON.stringify(args)], { stdio: ['ignore', 'pipe', 'pipe'] })
    let stderr = ''
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr = (stderr + chunk).slice(-8000) })
    const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })))
    let killed: Line | undefined
    let done: Line | undefined
    const inPlace = lastCommitted.has(path)
    try {
    for await (const text of createInterface({ input: child.stdout })) {
      const line = JSON.parse(text) as Line
      if (line.type === 'started') {
        figures.restarts++
        const offset = line.offset === null || line.offset === undefined ? -1n : BigInt(line.offset)
        // An independent fold of the log up to the store's position.
        expect(sorted(line.totals), `${label}: the state after a restart (${line.source}) at offset ${offset} is the fold of the log up to it`).toEqual(asObject(fold(Number(offset))))
        // A commit that returned survives a crash of the process.
        if (inPlace) expect(offset, `${label}: a restart in place keeps every commit that returned`).toBeGreaterThanOrEqual(lastCommitted.get(path)!)
        // A snapshot that was reported is found by a new owner (or one newer).
        else expect(offset, `${label}: a new owner starts at or after the newest reported snapshot`).toBeGreaterThanOrEqual(snapshotOffset)
      } else if (line.type === 'commit') {
        const offset = BigInt(line.offset!)
        if (offset > processed) processed = offset
        lastCommitted.set(path, offset)
      } else if (line.type === 'snapshot') {
        const offset = BigInt(line.offset!)
        if (offset > snapshotOffset) snapshotOffset = offset
      } else if (line.type === 'kill') {
        killed = line
      } else if (line.type === 'done') {
        done = line
        expect(BigInt(line.offset!), `${label}: an owner that finished is at the log's tail`).toBe(BigInt(appended - 1))
        expect(sorted(line.totals), `${label}: the final state is the fold of the whole log`).toEqual(asObject(fold(appended - 1)))
      }
    }
    } catch (err) {
      child.kill('SIGKILL')
      await exit
      throw err
    }
    if (!lastCommitted.has(path)) lastCommitted.set(path, -1n)
    const { code, signal } = await exit
    if (killed !== undefined) {
      expect(signal, `${label}: killed at ${killed.point} (${killed.detail}); stderr:\n${stderr}`).toBe('SIGKILL')
      return { killed: true, done }
    }
    expect({ code, signal }, `${label}: an owner that was not killed finishes cleanly; stderr:\n${stderr}`).toEqual({ code: 0, signal: null })
    return { killed: false, done }
  }

  try {
    let attempts = 0
    while (true) {
      if ((figures.killCombos[combo] ?? 0) >= options.kills || attempts >= options.kills * 3 || performance.now() > deadline) break
      attempts++
      // Enough events ahead for the next owner to reach its kill point.
      if (BigInt(appended) - processed < 6000n) {
        await appender.append(appended, appended + 8000)
        appended += 8000
      }
      let point = POINTS[attempts % POINTS.length]!
      // A restore and a replay happen only where there is a snapshot to restore.
      if ((point === 'restore-get' || point === 'replay') && snapshotOffset < 0n) point = 'commit'
      const how = rng.pick(HOWS)
      const n = point === 'commit' ? rng.int(1, 30) : point === 'gc' ? rng.int(1, 2) : rng.int(1, 3)
      const move = point === 'restore-get' || point === 'replay' || rng.chance(0.4)
      if (move) generation++
      const path = join(root, `store-${generation}`)
      const label = `[${combo}] attempt ${attempts}: kill at ${point} #${n} ${how}${move ? ' on a new owner' : ' in place'}`
      const { killed } = await owner(path, { point, n, how }, label)
      if (killed) {
        figures.kills++
        count(figures.killPoints, point)
        count(figures.killPoints, `${point}:${how}`)
        count(figures.killCombos, combo)
      } else {
        figures.unreached++
      }
    }
    console.log(`[torture] ${combo}: ${figures.killCombos[combo] ?? 0} kills in ${attempts} owners`)
    expect(figures.killCombos[combo] ?? 0, `${combo}: kills done within the bounds`).toBeGreaterThanOrEqual(options.kills)
    // The last owner moves once more and must finish with the whole log.
    generation++
    const { done } = await owner(join(root, `store-${generation}`), undefined, `[${combo}] final owner`)
    expect(done, `[${combo}] the final owner finishes`).toBeDefined()
  } finally {
    await appender.close()
    await bucket?.remove()
  }
}

/**
 * The producer of `npm run bench -- latency`, in a process of its own as a
 * producer would be: opens the file log in argv[2], prints "ready", waits for
 * "go" on stdin, then appends for argv[4] seconds at argv[3] events/s (0: as
 * fast as the log takes them, 64 appendAll() calls in flight) and prints
 * "done <events> <last revision>".
 *
 * Each event is `{"k":KEY,"t":MS}`: a key below argv[5], and the time at
 * which the event was due (performance.timeOrigin + performance.now(), so the
 * consumer's clock reads the same), not when it was sent: a producer that
 * falls behind its rate shows as latency instead of hiding it (coordinated
 * omission). Events due in the same 5 ms tick go in one appendAll(), as a
 * producer that batches does.
 */
import { createInterface } from 'node:readline'
import { openFileLog } from '../src/log/index.js'
import { rng } from './_util.js'

const [dir, rateText, secondsText, keysText] = process.argv.slice(2)
const rate = Number(rateText)
const seconds = Number(secondsText)
const keys = Number(keysText)
const log = await openFileLog(dir!)
const now = (): number => performance.timeOrigin + performance.now()
const next = rng(Number(process.pid))
const event = (due: number): Buffer => Buffer.from(`{"k":${Math.floor(next() * keys)},"t":${due.toFixed(3)}}`)

process.stdout.write('ready\n')
for await (const line of createInterface({ input: process.stdin })) {
  if (line !== 'go') continue
  const start = now()
  const end = start + seconds * 1000
  let sent = 0
  let last = -1n
  if (rate === 0) {
    await Promise.all(Array.from({ length: 64 }, async () => {
      while (now() < end) {
        const t = now()
        const batch = Array.from({ length: 50 }, () => event(t))
        sent += batch.length
        const r = await log.appendAll(batch)
        if (r > last) last = r
      }
    }))
  } else {
    const interval = 1000 / rate
    const inFlight = new Set<Promise<void>>()
    for (let t = now(); t < end; t = now()) {
      const due = Math.min(Math.floor((t - start) / interval) + 1, Math.floor((end - start) / interval))
      if (due > sent) {
        const batch: Buffer[] = []
        for (; sent < due; sent++) batch.push(event(start + sent * interval))
        const p: Promise<void> = log.appendAll(batch).then((r) => { if (r > last) last = r }).finally(() => inFlight.delete(p))
        inFlight.add(p)
      }
      await new Promise((resolve) => setTimeout(resolve, 5))
    }
    await Promise.all(inFlight)
  }
  process.stdout.write(`done ${sent} ${last}\n`)
  break
}
await log.close()

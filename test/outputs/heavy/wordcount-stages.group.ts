// The two stages of examples/wordcount, each one command (issue 9, item 5): on
// Kafka, and on the embedded file log. Slow (a tsx process per stage run), so
// in `npm run test:group`; test/kafka-consumer/wordcount.test.ts keeps the fast one.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { expect, it, onTestFinished } from 'vitest'
import { kafkaService } from '../../helpers/services.js'
import { randomName, tempDir } from '../../helpers/tmp.js'

const example = join(import.meta.dirname, '../../../examples/wordcount/main.ts')

/** Each of the 10 words appears 3 times in every 10 lines (lineAt). */
const totals = (lines: number): Record<string, number> => Object.fromEntries(['group', 'kafka', 'log', 'mark', 'offset', 'owner', 'partition', 'snapshot', 'state', 'tide'].map((w) => [w, (lines / 10) * 3]))

function start(args: string[], onLine?: (line: string, child: ReturnType<typeof spawn>) => void): { lines: string[]; done: Promise<number | null> } {
  const child = spawn(process.execPath, ['--import', 'tsx', example, ...args], { stdio: ['ignore', 'pipe', 'inherit'] })
  onTestFinished(() => {
    child.kill('SIGKILL')
  })
  const lines: string[] = []
  const exited = once(child, 'exit')
  const done = (async () => {
    for await (const line of createInterface({ input: child.stdout! })) {
      lines.push(line)
      onLine?.(line, child)
    }
    const [code] = await exited
    return code as number | null
  })()
  return { lines, done }
}

/** Sums the per-partition totals lines (`partition t/p: word=n ...`) or the embedded one (`stage sum: word=n ...`). */
function summed(lines: string[], prefix: RegExp): Record<string, number> {
  const out: Record<string, number> = {}
  for (const line of lines.filter((l) => prefix.test(l) && /^(\w+=\d+ ?)+$/.test(l.replace(prefix, '')))) {
    for (const pair of line.replace(prefix, '').split(' ').filter(Boolean)) {
      const [w, n] = pair.split('=')
      out[w!] = (out[w!] ?? 0) + Number(n)
    }
  }
  return out
}

it('examples/wordcount on Kafka: stage 1 counts and emits every change through its outbox, stage 2 sums them with dedupe to the same totals', async () => {
  const dir = tempDir()
  const common = ['--brokers', kafkaService().brokers.join(','), '--topic', randomName('wc-lines'), '--counts-topic', randomName('wc-counts'), '--job', randomName('wc'), '--store', `file://${join(dir, 'snapshots')}`, '--idle-exit']
  const count = start([...common, '--state', join(dir, 'count'), '--produce', '1000'])
  expect(await count.done).toBe(0)
  expect(summed(count.lines, /^partition [^:]+: /)).toEqual(totals(1000))
  const sum = start([...common, '--state', join(dir, 'sum'), '--stage', 'sum'])
  expect(await sum.done).toBe(0)
  expect(summed(sum.lines, /^partition [^:]+: /)).toEqual(totals(1000))
  expect(sum.lines.at(-1)).toMatch(/^closed: 4 partitions handed off, 3000 changes applied by this process$/)
})

it('examples/wordcount on the embedded file log (no services): both stages, and SIGTERM stops a stage gracefully', async () => {
  const dir = tempDir()
  const count = start(['--embedded', dir, '--produce', '1000', '--idle-exit'])
  expect(await count.done).toBe(0)
  expect(summed(count.lines, /^stage count: /)).toEqual(totals(1000))
  const sum = start(['--embedded', dir, '--stage', 'sum'], (line, child) => {
    if (/^stage sum: empty state/.test(line)) child.kill('SIGTERM')
  })
  expect(await sum.done).toBe(0)
  expect(sum.lines).toContain('SIGTERM: stopping')
  expect(sum.lines.at(-1)).toMatch(/^closed: \d+ events applied by this process$/)
  const again = start(['--embedded', dir, '--stage', 'sum', '--idle-exit'])
  expect(await again.done).toBe(0)
  expect(summed(again.lines, /^stage sum: /)).toEqual(totals(1000))
})

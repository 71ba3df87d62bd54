// The contract every RevisionedLog keeps, run against each implementation
// (file-log.test.ts, kafka-log.test.ts), in the way abstract-level's suite is.
import { describe, it, type ExpectStatic, type TestContext } from 'vitest'
import { NO_REVISION, type LogEntry, type RevisionedLog } from '../../src/log/index.js'

export interface LogSuiteOptions {
  name: string
  /** Opens a fresh empty log. `reopen()` opens another handle on the same log, as another client would. */
  create(): Promise<{ log: RevisionedLog; reopen(): Promise<RevisionedLog> }>
  supports: {
    /** truncate() deletes entries; otherwise it must fail with TIDEMARK_LOG_TRUNCATE_UNSUPPORTED. */
    truncate: boolean
  }
  /** Run the tests of the suite concurrently (the Kafka log's first read waits for a group join). */
  concurrent?: boolean
}

const text = (s: string): Uint8Array => new TextEncoder().encode(s)
const str = (b: Uint8Array): string => new TextDecoder().decode(b)

async function collect(iterable: AsyncIterable<LogEntry>): Promise<Array<[bigint, string]>> {
  const out: Array<[bigint, string]> = []
  for await (const e of iterable) out.push([e.revision, str(e.data)])
  return out
}

export function logSuite(options: LogSuiteOptions): void {
  const suite = options.concurrent ? describe.concurrent : describe

  // The context's onTestFinished, not the global one: with concurrent tests
  // the global one cannot tell which test an await resumed in.
  async function open(context: TestContext): Promise<{ log: RevisionedLog; reopen(): Promise<RevisionedLog> }> {
    const opened = await options.create()
    const handles: RevisionedLog[] = [opened.log]
    context.onTestFinished(async () => {
      await Promise.all(handles.map((h) => h.close()))
    })
    return {
      log: opened.log,
      reopen: async () => {
        const other = await opened.reopen()
        handles.push(other)
        return other
      },
    }
  }

  suite(`RevisionedLog contract: ${options.name}`, () => {
    it('an empty log starts and ends at 0 and reads nothing', async (context) => {
      const { expect } = context
      const { log } = await open(context)
      expect(await log.oldest()).toBe(0n)
      expect(await log.tail()).toBe(0n)
      expect(await collect(log.read(0n))).toEqual([])
    })

    it('reads back appended entries in order, from any revision that follows one', async (context) => {
      const { expect } = context
      const { log } = await open(context)
      const revisions: bigint[] = []
      for (let i = 0; i < 10; i++) revisions.push(await log.append(text(`e${i}`)))
      for (let i = 1; i < revisions.length; i++) expect(revisions[i]! > revisions[i - 1]!).toBe(true)
      expect(await log.tail()).toBe(revisions[9]! + 1n)
      expect(await collect(log.read(0n))).toEqual(revisions.map((r, i) => [r, `e${i}`]))
      expect(await collect(log.read(revisions[6]! + 1n))).toEqual([[revisions[7], 'e7'], [revisions[8], 'e8'], [revisions[9], 'e9']])
      expect(await collect(log.read(revisions[2]! + 1n, { end: revisions[5] }))).toEqual([[revisions[3], 'e3'], [revisions[4], 'e4']])
      expect(await collect(log.read(await log.tail()))).toEqual([])
    })

    it('readBatches() gives the entries read() gives, in order, in non-empty arrays, from any revision and up to any end', async (context) => {
      const { expect } = context
      const { log } = await open(context)
      const revisions: bigint[] = []
      for (let i = 0; i < 40; i++) revisions.push(await log.append(text(`e${i}`)))
      const batched = async (from: bigint, end?: bigint): Promise<Array<[bigint, string]>> => {
        const out: Array<[bigint, string]> = []
        for await (const batch of end === undefined ? log.readBatches(from) : log.readBatches(from, { end })) {
          expect(batch.length).toBeGreaterThan(0)
          for (const e of batch) out.push([e.revision, str(e.data)])
        }
        return out
      }
      for (const [from, end] of [[0n, undefined], [revisions[17]! + 1n, undefined], [revisions[3]! + 1n, revisions[29]], [await log.tail(), undefined]] as const) {
        const expected = await collect(end === undefined ? log.read(from) : log.read(from, { end }))
        expect(await batched(from, end)).toEqual(expected)
      }
      expect((await batched(0n)).map(([, s]) => s)).toEqual(revisions.map((_, i) => `e${i}`))
      expectThrows(expect, () => log.readBatches(-1n), RangeError, /from \(-1\)/)
      expectThrows(expect, () => log.readBatches(5n, { end: 2n }), RangeError, /end \(2\)/)
      await log.close()
      expectThrows(expect, () => log.readBatches(0n), Error, /closed/)
    })

    it('keeps bytes as they are, including empty entries', async (context) => {
      const { expect } = context
      const { log } = await open(context)
      const binary = new Uint8Array(256).map((_, i) => i)
      const a = await log.append(binary)
      const b = await log.append(new Uint8Array(0))
      const read: LogEntry[] = []
      for await (const e of log.read(0n)) read.push(e)
      expect(read.map((e) => e.revision)).toEqual([a, b])
      expect(Buffer.from(read[0]!.data).equals(Buffer.from(binary))).toBe(true)
      expect(read[1]!.data.byteLength).toBe(0)
    })

    it('a read ends at the tail as it was when the read began', async (context) => {
      const { expect } = context
      const { log } = await open(context)
      const first = await log.append(text('a'))
      await log.append(text('b'))
      const seen: string[] = []
      for await (const e of log.read(0n)) {
        seen.push(str(e.data))
        if (e.revision === first) await log.append(text('late'))
      }
      expect(seen).toEqual(['a', 'b'])
      expect((await collect(log.read(0n))).map(([, s]) => s)).toEqual(['a', 'b', 'late'])
    })

    it('appends conditionally only on the last entry that took effect', async (context) => {
      const { expect } = context
      const { log } = await open(context)
      const first = await log.appendConditionally(text('first'), NO_REVISION)
      expect(first).toBeTypeOf('bigint')
      expect(await log.appendConditionally(text('again first'), NO_REVISION)).toBeUndefined()
      const second = await log.appendConditionally(text('second'), first!)
      expect(second! > first!).toBe(true)
      expect(await log.appendConditionally(text('stale'), first!)).toBeUndefined()
      const third = await log.append(text('third'))
      expect(await log.appendConditionally(text('stale again'), second!)).toBeUndefined()
      const fourth = await log.appendConditionally(text('fourth'), third)
      expect(await collect(log.read(0n))).toEqual([[first, 'first'], [second, 'second'], [third, 'third'], [fourth, 'fourth']])
    })

    it('another handle sees the appends and competes on the same tail', async (context) => {
      const { expect } = context
      const { log, reopen } = await open(context)
      const other = await reopen()
      const base = await log.append(text('base'))
      expect(await collect(other.read(0n))).toEqual([[base, 'base']])
      const results = await Promise.all([log.appendConditionally(text('mine'), base), other.appendConditionally(text('theirs'), base)])
      const winners = results.filter((r) => r !== undefined)
      expect(winners).toHaveLength(1)
      const fromLog = await collect(log.read(0n))
      expect(fromLog).toHaveLength(2)
      expect(fromLog[1]![0]).toBe(winners[0])
      expect(await collect(other.read(0n))).toEqual(fromLog)
    })

    it('no update is lost when handles race read-modify-append loops', async (context) => {
      const { expect } = context
      const { log, reopen } = await open(context)
      const handles = [log, await reopen(), await reopen()]
      const perHandle = 15
      const losses: number[] = []
      await Promise.all(
        handles.map(async (h, id) => {
          let last = NO_REVISION
          let lost = 0
          for (let done = 0; done < perHandle; ) {
            for await (const e of h.read(last + 1n)) last = e.revision
            const r = await h.appendConditionally(text(`h${id}-${done}`), last)
            if (r === undefined) lost++
            else {
              last = r
              done++
            }
          }
          losses.push(lost)
        }),
      )
      const all = await collect(log.read(0n))
      expect(all).toHaveLength(handles.length * perHandle)
      for (let id = 0; id < handles.length; id++) {
        expect(all.filter(([, s]) => s.startsWith(`h${id}-`)).map(([, s]) => s)).toEqual(Array.from({ length: perHandle }, (_, i) => `h${id}-${i}`))
      }
      for (const h of handles.slice(1)) expect(await collect(h.read(0n))).toEqual(all)
    })

    it('refuses wrong arguments with TypeError and RangeError naming them', async (context) => {
      const { expect } = context
      const { log } = await open(context)
      expectThrows(expect, () => log.read(-1n), RangeError, /from \(-1\)/)
      expectThrows(expect, () => log.read(1 as unknown as bigint), TypeError, /from must be a bigint/)
      expectThrows(expect, () => log.read(5n, { end: 2n }), RangeError, /end \(2\)/)
      await expect(log.append('text' as unknown as Uint8Array)).rejects.toThrow(TypeError)
      await expect(log.appendConditionally(text('x'), -2n)).rejects.toThrow(/expected \(-2\)/)
      await expect(log.truncate(-1n)).rejects.toThrow(RangeError)
      await expect(log.truncate(5n)).rejects.toThrow(/before \(5\) is past the tail/)
      await expect(collect(log.read(3n))).rejects.toThrow(/from \(3\) is past the tail/)
    })

    it('a closed log refuses every call with TIDEMARK_LOG_CLOSED', async (context) => {
      const { expect } = context
      const { log } = await open(context)
      await log.append(text('x'))
      await log.close()
      await log.close()
      for (const call of [() => log.tail(), () => log.oldest(), () => log.append(text('y')), () => log.appendConditionally(text('y'), 0n), () => log.truncate(0n)]) {
        await expect(call()).rejects.toMatchObject({ code: 'TIDEMARK_LOG_CLOSED' })
      }
      expectThrows(expect, () => log.read(0n), Error, /closed/)
    })

    if (options.supports.truncate) {
      it('truncate() drops entries before a revision, and reads before the oldest fail with TIDEMARK_LOG_TRUNCATED', async (context) => {
      const { expect } = context
        const { log, reopen } = await open(context)
        const revisions: bigint[] = []
        for (let i = 0; i < 300; i++) revisions.push(await log.append(text(`entry ${i}`.padEnd(200, '.'))))
        const cut = revisions[250]!
        await log.truncate(cut)
        const oldest = await log.oldest()
        expect(oldest > 0n && oldest <= cut).toBe(true)
        const after = await collect(log.read(cut))
        expect(after.map(([r]) => r)).toEqual(revisions.slice(250))
        await expect(collect(log.read(0n))).rejects.toMatchObject({ code: 'TIDEMARK_LOG_TRUNCATED', details: { from: 0n, oldest } })
        const other = await reopen()
        expect(await other.oldest()).toBe(oldest)
        const next = await other.append(text('after truncation'))
        expect((await collect(log.read(cut))).at(-1)).toEqual([next, 'after truncation'])
      })
    } else {
      it('truncate() fails with TIDEMARK_LOG_TRUNCATE_UNSUPPORTED and leaves the log as it was', async (context) => {
      const { expect } = context
        const { log } = await open(context)
        const revisions: bigint[] = []
        for (let i = 0; i < 5; i++) revisions.push(await log.append(text(`e${i}`)))
        // The factory's duplicate window must be shorter than 4 entries, or there is nothing to delete.
        await expect(log.truncate(revisions[4]!)).rejects.toMatchObject({ code: 'TIDEMARK_LOG_TRUNCATE_UNSUPPORTED', retriable: false })
        expect(await log.oldest()).toBe(0n)
        expect((await collect(log.read(0n))).map(([r]) => r)).toEqual(revisions)
      })
    }
  })
}

function expectThrows(expect: ExpectStatic, fn: () => unknown, type: new (...args: never[]) => Error, message: RegExp): void {
  let error: unknown
  try {
    fn()
  } catch (err) {
    error = err
  }
  expect(error).toBeInstanceOf(type)
  expect((error as Error).message).toMatch(message)
}

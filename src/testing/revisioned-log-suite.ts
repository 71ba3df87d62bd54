// The RevisionedLog contract, run against every implementation: Tidemark's
// (the file log, the Kafka log) and yours, as abstract-level's suite is.
// See docs/testing.md.
import assert from 'node:assert/strict'
import { NO_REVISION, type LogEntry, type RevisionedLog } from '../log/revisioned-log.js'
import { checkRunner, Registrar, rejectsMatching, throwsSync, type SuiteRunner, type TestScope } from './runner.js'

export interface RevisionedLogSuiteOptions extends SuiteRunner {
  /** Names the group of tests. */
  name: string
  /** Opens a fresh empty log. `reopen()` opens another handle on the same log, as another client would. The suite closes every handle. */
  create(): Promise<{ log: RevisionedLog; reopen(): Promise<RevisionedLog> }>
  supports: {
    /** truncate() deletes entries; otherwise it must fail with TIDEMARK_LOG_TRUNCATE_UNSUPPORTED. */
    truncate: boolean
  }
}

const text = (s: string): Uint8Array => new TextEncoder().encode(s)
const str = (b: Uint8Array): string => new TextDecoder().decode(b)

async function collect(iterable: AsyncIterable<LogEntry>): Promise<Array<[bigint, string]>> {
  const out: Array<[bigint, string]> = []
  for await (const e of iterable) out.push([e.revision, str(e.data)])
  return out
}

/**
 * Registers the RevisionedLog contract's tests on your runner: reads from
 * any revision, batches, conditional appends, competing handles, truncation
 * as `supports` declares it, argument checks and close. To run them
 * concurrently under vitest, pass `test: it.concurrent`.
 */
export function revisionedLogSuite(options: RevisionedLogSuiteOptions): void {
  const runner = checkRunner(options, 'revisionedLogSuite')
  if (typeof options.name !== 'string') throw new TypeError('revisionedLogSuite: options.name must be a string')
  if (typeof options.create !== 'function') throw new TypeError('revisionedLogSuite: options.create must be a function returning { log, reopen }')
  if (options.supports === null || typeof options.supports !== 'object' || typeof options.supports.truncate !== 'boolean') {
    throw new TypeError('revisionedLogSuite: options.supports must be { truncate: boolean }')
  }
  const r = new Registrar(runner)
  const it = r.test.bind(r)
  const describe = r.group.bind(r)

  async function open(scope: TestScope): Promise<{ log: RevisionedLog; reopen(): Promise<RevisionedLog> }> {
    const opened = await options.create()
    const handles: RevisionedLog[] = [opened.log]
    scope.defer(async () => {
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

  describe(`RevisionedLog contract: ${options.name}`, () => {
    it('an empty log starts and ends at 0 and reads nothing', async (t) => {
      const { log } = await open(t)
      assert.equal(await log.oldest(), 0n)
      assert.equal(await log.tail(), 0n)
      assert.deepEqual(await collect(log.read(0n)), [])
    })

    it('reads back appended entries in order, from any revision that follows one', async (t) => {
      const { log } = await open(t)
      const revisions: bigint[] = []
      for (let i = 0; i < 10; i++) revisions.push(await log.append(text(`e${i}`)))
      for (let i = 1; i < revisions.length; i++) assert.ok(revisions[i]! > revisions[i - 1]!, `revision ${i} does not grow`)
      assert.equal(await log.tail(), revisions[9]! + 1n)
      assert.deepEqual(await collect(log.read(0n)), revisions.map((r, i) => [r, `e${i}`]))
      assert.deepEqual(await collect(log.read(revisions[6]! + 1n)), [[revisions[7], 'e7'], [revisions[8], 'e8'], [revisions[9], 'e9']])
      assert.deepEqual(await collect(log.read(revisions[2]! + 1n, { end: revisions[5] })), [[revisions[3], 'e3'], [revisions[4], 'e4']])
      assert.deepEqual(await collect(log.read(await log.tail())), [])
    })

    it('readBatches() gives the entries read() gives, in order, in non-empty arrays, from any revision and up to any end', async (t) => {
      const { log } = await open(t)
      const revisions: bigint[] = []
      for (let i = 0; i < 40; i++) revisions.push(await log.append(text(`e${i}`)))
      const batched = async (from: bigint, end?: bigint): Promise<Array<[bigint, string]>> => {
        const out: Array<[bigint, string]> = []
        for await (const batch of end === undefined ? log.readBatches(from) : log.readBatches(from, { end })) {
          assert.ok(batch.length > 0, 'readBatches() gave an empty batch')
          for (const e of batch) out.push([e.revision, str(e.data)])
        }
        return out
      }
      for (const [from, end] of [[0n, undefined], [revisions[17]! + 1n, undefined], [revisions[3]! + 1n, revisions[29]], [await log.tail(), undefined]] as const) {
        const expected = await collect(end === undefined ? log.read(from) : log.read(from, { end }))
        assert.deepEqual(await batched(from, end), expected)
      }
      assert.deepEqual((await batched(0n)).map(([, s]) => s), revisions.map((_, i) => `e${i}`))
      throwsSync(() => log.readBatches(-1n), RangeError, /from \(-1\)/)
      throwsSync(() => log.readBatches(5n, { end: 2n }), RangeError, /end \(2\)/)
      await log.close()
      throwsSync(() => log.readBatches(0n), Error, /closed/)
    })

    it('keeps bytes as they are, including empty entries', async (t) => {
      const { log } = await open(t)
      const binary = new Uint8Array(256).map((_, i) => i)
      const a = await log.append(binary)
      const b = await log.append(new Uint8Array(0))
      const read: LogEntry[] = []
      for await (const e of log.read(0n)) read.push(e)
      assert.deepEqual(read.map((e) => e.revision), [a, b])
      assert.ok(Buffer.from(read[0]!.data).equals(Buffer.from(binary)), 'the bytes read differ from those appended')
      assert.equal(read[1]!.data.byteLength, 0)
    })

    it('a read ends at the tail as it was when the read began', async (t) => {
      const { log } = await open(t)
      const first = await log.append(text('a'))
      await log.append(text('b'))
      const seen: string[] = []
      for await (const e of log.read(0n)) {
        seen.push(str(e.data))
        if (e.revision === first) await log.append(text('late'))
      }
      assert.deepEqual(seen, ['a', 'b'])
      assert.deepEqual((await collect(log.read(0n))).map(([, s]) => s), ['a', 'b', 'late'])
    })

    it('appends conditionally only on the last entry that took effect', async (t) => {
      const { log } = await open(t)
      const first = await log.appendConditionally(text('first'), NO_REVISION)
      assert.equal(typeof first, 'bigint')
      assert.equal(await log.appendConditionally(text('again first'), NO_REVISION), undefined)
      const second = await log.appendConditionally(text('second'), first!)
      assert.ok(second! > first!)
      assert.equal(await log.appendConditionally(text('stale'), first!), undefined)
      const third = await log.append(text('third'))
      assert.equal(await log.appendConditionally(text('stale again'), second!), undefined)
      const fourth = await log.appendConditionally(text('fourth'), third)
      assert.deepEqual(await collect(log.read(0n)), [[first, 'first'], [second, 'second'], [third, 'third'], [fourth, 'fourth']])
    })

    it('another handle sees the appends and competes on the same tail', async (t) => {
      const { log, reopen } = await open(t)
      const other = await reopen()
      const base = await log.append(text('base'))
      assert.deepEqual(await collect(other.read(0n)), [[base, 'base']])
      const results = await Promise.all([log.appendConditionally(text('mine'), base), other.appendConditionally(text('theirs'), base)])
      const winners = results.filter((r) => r !== undefined)
      assert.equal(winners.length, 1)
      const fromLog = await collect(log.read(0n))
      assert.equal(fromLog.length, 2)
      assert.equal(fromLog[1]![0], winners[0])
      assert.deepEqual(await collect(other.read(0n)), fromLog)
    })

    it('no update is lost when handles race read-modify-append loops', async (t) => {
      const { log, reopen } = await open(t)
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
      assert.equal(all.length, handles.length * perHandle)
      for (let id = 0; id < handles.length; id++) {
        assert.deepEqual(all.filter(([, s]) => s.startsWith(`h${id}-`)).map(([, s]) => s), Array.from({ length: perHandle }, (_, i) => `h${id}-${i}`))
      }
      for (const h of handles.slice(1)) assert.deepEqual(await collect(h.read(0n)), all)
    })

    it('refuses wrong arguments with TypeError and RangeError naming them', async (t) => {
      const { log } = await open(t)
      throwsSync(() => log.read(-1n), RangeError, /from \(-1\)/)
      throwsSync(() => log.read(1 as unknown as bigint), TypeError, /from must be a bigint/)
      throwsSync(() => log.read(5n, { end: 2n }), RangeError, /end \(2\)/)
      await assert.rejects(log.append('text' as unknown as Uint8Array), TypeError)
      await assert.rejects(log.appendConditionally(text('x'), -2n), /expected \(-2\)/)
      await assert.rejects(log.truncate(-1n), RangeError)
      await assert.rejects(log.truncate(5n), /before \(5\) is past the tail/)
      await assert.rejects(collect(log.read(3n)), /from \(3\) is past the tail/)
    })

    it('a closed log refuses every call with TIDEMARK_LOG_CLOSED', async (t) => {
      const { log } = await open(t)
      await log.append(text('x'))
      await log.close()
      await log.close()
      for (const call of [() => log.tail(), () => log.oldest(), () => log.append(text('y')), () => log.appendConditionally(text('y'), 0n), () => log.truncate(0n)]) {
        await rejectsMatching(call(), { code: 'TIDEMARK_LOG_CLOSED' })
      }
      throwsSync(() => log.read(0n), Error, /closed/)
    })

    if (options.supports.truncate) {
      it('truncate() drops entries before a revision, and reads before the oldest fail with TIDEMARK_LOG_TRUNCATED', async (t) => {
        const { log, reopen } = await open(t)
        const revisions: bigint[] = []
        for (let i = 0; i < 300; i++) revisions.push(await log.append(text(`entry ${i}`.padEnd(200, '.'))))
        const cut = revisions[250]!
        await log.truncate(cut)
        const oldest = await log.oldest()
        assert.ok(oldest > 0n && oldest <= cut, `oldest ${oldest} is not in (0, ${cut}]`)
        const after = await collect(log.read(cut))
        assert.deepEqual(after.map(([r]) => r), revisions.slice(250))
        await rejectsMatching(collect(log.read(0n)), { code: 'TIDEMARK_LOG_TRUNCATED', details: { from: 0n, oldest } })
        const other = await reopen()
        assert.equal(await other.oldest(), oldest)
        const next = await other.append(text('after truncation'))
        assert.deepEqual((await collect(log.read(cut))).at(-1), [next, 'after truncation'])
      })
    } else {
      it('truncate() fails with TIDEMARK_LOG_TRUNCATE_UNSUPPORTED and leaves the log as it was', async (t) => {
        const { log } = await open(t)
        const revisions: bigint[] = []
        for (let i = 0; i < 5; i++) revisions.push(await log.append(text(`e${i}`)))
        // The factory's duplicate window must be shorter than 4 entries, or there is nothing to delete.
        await rejectsMatching(log.truncate(revisions[4]!), { code: 'TIDEMARK_LOG_TRUNCATE_UNSUPPORTED', retriable: false })
        assert.equal(await log.oldest(), 0n)
        assert.deepEqual((await collect(log.read(0n))).map(([r]) => r), revisions)
      })
    }
  })
}

// Public functions given junk where an object, a store or bytes belong: each
// says what it expected, in a TypeError or RangeError, instead of failing
// inside with the runtime's own words ("Cannot read properties of null").
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  decodeOutboxRecord, formatPosition, mapState, openFileLog, PartitionMetrics, PartitionProcessor, PartitionStore,
  readDedupeWatermarks, readOutbox, restoreToPoint, valueState, type FileLog,
} from '../src/index.js'
import { makeTempDir, type TempDir } from './helpers/tmp.js'

const JUNK: unknown[] = [undefined, null, 0, 'x', [], () => 1, 1n]
/** What a message says when a function did not check its argument. */
const INTERNAL = /Cannot read propert|is not a function|is not iterable|Cannot destructure|Cannot convert/

async function refusal(call: () => unknown): Promise<Error> {
  try {
    await call()
  } catch (err) {
    return err as Error
  }
  throw new Error('resolved')
}

function show(v: unknown): string {
  return typeof v === 'bigint' ? `${v}n` : typeof v === 'function' ? 'a function' : JSON.stringify(v) ?? 'undefined'
}

describe('junk arguments', () => {
  const st = valueState<number>('s')
  let store: PartitionStore
  let log: FileLog
  let processor: PartitionProcessor<unknown>
  let dir: TempDir
  beforeAll(async () => {
    dir = makeTempDir()
    const root = dir.path
    store = await PartitionStore.open({ path: join(root, 'store'), states: [st] })
    log = await openFileLog(join(root, 'log'), { sync: false })
    processor = new PartitionProcessor({ job: 'j', topic: 't', partition: 0, log, path: join(root, 'p'), states: [st], handler: () => undefined })
    await processor.start()
  })
  afterAll(async () => {
    await processor.close()
    await store.close()
    await log.close()
    await dir.cleanup()
  })

  const cases: Array<[string, (junk: unknown) => unknown, RegExp]> = [
    ['readOutbox(store)', (j) => readOutbox(j as never), /readOutbox\(store\): store must be an open PartitionStore/],
    ['readDedupeWatermarks(store)', (j) => readDedupeWatermarks(j as never), /readDedupeWatermarks\(store\): store must be an open PartitionStore/],
    ['decodeOutboxRecord(bytes)', (j) => decodeOutboxRecord(j as never), /bytes must be a Uint8Array/],
    ['new PartitionMetrics(labels)', (j) => new PartitionMetrics(j as never), /labels/],
    ['formatPosition(position)', (j) => formatPosition(j as never), /position must be|position/],
    ['valueState(name, options)', (j) => valueState('v', j as never), /options must be an object/],
    ['mapState(name, options)', (j) => mapState('m', j as never), /options must be an object/],
    ['tx.value(def)', (j) => store.transaction().value(j as never), /state definition/],
    ['store.transaction(options)', (j) => store.transaction(j as never), /options must be an object/],
    ['processor.catchUp(options)', (j) => processor.catchUp(j as never), /catchUp\(options\): options must be an object/],
    // A junk signal used to pass run() and fail later in a timer's callback, outside any promise: an uncaught exception.
    ['processor.run(signal)', (j) => processor.run(j as never), /run\(signal\): signal must be an AbortSignal/],
    ['processor.catchUp({ signal })', (j) => processor.catchUp({ signal: j as never }), /options\.signal must be an AbortSignal/],
    ['processor.catchUp({ end })', (j) => processor.catchUp({ end: j as never }), /options\.end must be a bigint/],
    ['restoreToPoint(options)', (j) => restoreToPoint(j as never), /options/],
    ['view.entries(options)', async (j) => {
      for await (const entry of store.transaction().value(st).entries(j as never)) void entry
    }, /entries\(options\): options must be an object/],
  ]

  for (const [name, call, message] of cases) {
    it(`${name} names what it expected`, async () => {
      let refused = 0
      for (const junk of JUNK) {
        let err: Error
        try {
          err = await refusal(() => call(junk))
        } catch {
          // Accepted: some of JUNK are valid here (undefined options, a name).
          continue
        }
        refused++
        expect(err, `${name} with ${show(junk)}: ${err.message}`).toBeInstanceOf(Error)
        expect(err.message, `${name} with ${show(junk)}`).not.toMatch(INTERNAL)
        // A TidemarkError (a closed store, say) is not a junk argument's refusal.
        if (err instanceof TypeError || err instanceof RangeError) expect(err.message, `${name} with ${show(junk)}`).toMatch(message)
      }
      expect(refused, `${name} refused some junk`).toBeGreaterThan(0)
    })
  }
})

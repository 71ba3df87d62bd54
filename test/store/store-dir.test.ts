import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { rm } from 'node:fs/promises'
import { join } from 'node:path'
import { ClassicLevel } from 'classic-level'
import { afterEach, describe, expect, it } from 'vitest'
import { openFileLog } from '../../src/log/index.js'
import { PartitionStore, TidemarkError, valueState } from '../../src/index.js'
import { STORE_MARKER } from '../../src/store/store-dir.js'
import { tempDir } from '../helpers/tmp.js'

const counts = valueState<number>('counts')
const T = 'events'

const open: PartitionStore[] = []
async function openStore(path: string, create?: boolean): Promise<PartitionStore> {
  const store = await PartitionStore.open({ path, states: [counts], ...(create === undefined ? {} : { create }) })
  open.push(store)
  return store
}
afterEach(async () => {
  await Promise.all(open.splice(0).map((s) => s.close()))
})

/** Every file under `dir` with its bytes: what must not change. */
function contents(dir: string): Record<string, string> {
  const out: Record<string, string> = {}
  for (const name of readdirSync(dir, { recursive: true }) as string[]) {
    const path = join(dir, name)
    try {
      out[name] = readFileSync(path, 'hex')
    } catch {
      out[name] = '<dir>'
    }
  }
  return out
}

/** A LevelDB store as an earlier version made it: no marker. */
async function legacyStore(path: string): Promise<void> {
  const store = await PartitionStore.open({ path, states: [counts] })
  const tx = store.transaction()
  tx.value(counts).put('a', 7)
  await tx.commit({ topic: T, partition: 0, offset: 3n })
  await store.close()
  await rm(join(path, STORE_MARKER))
}

describe('what PartitionStore.open accepts', () => {
  it('a new store carries the marker, and opens again with create: false', async () => {
    const path = join(tempDir(), 'a', 'store')
    const store = await openStore(path)
    const tx = store.transaction()
    tx.value(counts).put('a', 1)
    await tx.commit({ topic: T, partition: 0, offset: 0n })
    expect(JSON.parse(readFileSync(join(path, STORE_MARKER), 'utf8'))).toMatchObject({ format: 1, kind: 'store' })
    await store.close()
    const again = await openStore(path, false)
    expect(again.position(T, 0)).toBe(0n)
  })

  it('refuses a file log\'s directory with TIDEMARK_STORE_NOT_A_STORE and changes nothing there', async () => {
    const dir = tempDir()
    const log = await openFileLog(dir)
    await log.append(Buffer.from('an event'))
    await log.close()
    const before = contents(dir)
    for (const create of [true, false]) {
      const err = await PartitionStore.open({ path: dir, create }).catch((e: unknown) => e)
      expect(err).toBeInstanceOf(TidemarkError)
      expect(err).toMatchObject({ code: 'TIDEMARK_STORE_NOT_A_STORE', retriable: false })
      expect((err as Error).message).toMatch(/\.seg/)
    }
    expect(contents(dir)).toEqual(before)
  })

  it('refuses a directory with LevelDB-like names beside other files (LOG and a thesis)', async () => {
    const dir = tempDir()
    writeFileSync(join(dir, 'LOG'), 'x')
    writeFileSync(join(dir, 'thesis.tex'), 'precious')
    await expect(PartitionStore.open({ path: dir })).rejects.toMatchObject({ code: 'TIDEMARK_STORE_NOT_A_STORE' })
    expect(contents(dir)).toEqual({ LOG: Buffer.from('x').toString('hex'), 'thesis.tex': Buffer.from('precious').toString('hex') })
  })

  it('a path that is a file is not a store; nothing is created under it', async () => {
    const file = join(tempDir(), 'file')
    writeFileSync(file, 'not a store')
    await expect(PartitionStore.open({ path: file })).rejects.toMatchObject({ code: 'TIDEMARK_STORE_NOT_A_STORE' })
    await expect(PartitionStore.open({ path: join(file, 'store') })).rejects.toMatchObject({ code: 'TIDEMARK_STORE_NOT_A_STORE' })
    expect(readFileSync(file, 'utf8')).toBe('not a store')
  })

  it('with create: false a missing path or an empty directory is TIDEMARK_STORE_NOT_FOUND, and nothing is created', async () => {
    const root = tempDir()
    const missing = join(root, 'parent', 'store')
    await expect(PartitionStore.open({ path: missing, create: false })).rejects.toMatchObject({ code: 'TIDEMARK_STORE_NOT_FOUND', retriable: false })
    expect(readdirSync(root)).toEqual([])
    const empty = join(root, 'empty')
    mkdirSync(empty)
    await expect(PartitionStore.open({ path: empty, create: false })).rejects.toMatchObject({ code: 'TIDEMARK_STORE_NOT_FOUND' })
    expect(readdirSync(empty)).toEqual([])
    await expect(PartitionStore.open({ path: empty, create: 'no' as never })).rejects.toThrow(/options\.create/)
  })

  it('paths under /proc fail at once instead of hanging', { timeout: 5000 }, async () => {
    await expect(PartitionStore.open({ path: '/proc/self' })).rejects.toMatchObject({ code: 'TIDEMARK_STORE_NOT_A_STORE' })
    await expect(PartitionStore.open({ path: '/proc/tidemark-none/store', create: false })).rejects.toMatchObject({ code: 'TIDEMARK_STORE_NOT_FOUND' })
    // Node's recursive mkdir loops forever on /proc; creating there fails.
    await expect(PartitionStore.open({ path: '/proc/tidemark-none/store' })).rejects.toMatchObject({ code: 'TIDEMARK_STORE_OPEN_FAILED', details: { errno: 'ENOENT' } })
    await expect(PartitionStore.open({ path: '/proc/tidemark-none' })).rejects.toMatchObject({ code: 'TIDEMARK_STORE_OPEN_FAILED' })
  })

  it('opens a store of an earlier version (LevelDB files only) and adds the marker', async () => {
    const path = tempDir()
    await legacyStore(path)
    expect(existsSync(join(path, STORE_MARKER))).toBe(false)
    const store = await openStore(path, false)
    expect(store.position(T, 0)).toBe(3n)
    expect(await store.transaction().value(counts).get('a')).toBe(7)
    expect(existsSync(join(path, STORE_MARKER))).toBe(true)
  })

  it('a LevelDB directory without a marker is refused when it holds anything else, or no valid CURRENT', async () => {
    const path = tempDir()
    await legacyStore(path)
    writeFileSync(join(path, 'notes.txt'), 'mine')
    await expect(PartitionStore.open({ path })).rejects.toMatchObject({ code: 'TIDEMARK_STORE_NOT_A_STORE' })
    await rm(join(path, 'notes.txt'))
    writeFileSync(join(path, 'CURRENT'), 'garbage')
    const before = contents(path)
    await expect(PartitionStore.open({ path })).rejects.toMatchObject({ code: 'TIDEMARK_STORE_NOT_A_STORE' })
    expect(contents(path)).toEqual(before)
  })

  it('a marked store that lost its CURRENT is damaged, not started afresh', async () => {
    const path = tempDir()
    const store = await PartitionStore.open({ path, states: [counts] })
    const tx = store.transaction()
    for (let i = 0; i < 1000; i++) tx.value(counts).put(`k${i}`, i)
    await tx.commit({ topic: T, partition: 0, offset: 0n })
    await store.flush()
    await store.close()
    await rm(join(path, 'CURRENT'))
    const before = contents(path)
    await expect(PartitionStore.open({ path })).rejects.toMatchObject({ code: 'TIDEMARK_STORE_OPEN_FAILED', message: expect.stringMatching(/no CURRENT/) })
    expect(contents(path)).toEqual(before)
  })
})

/**
 * Fault injection: the next LevelDB open of any classic-level database (the
 * reopen after a quiesce) fails with `error`, the way a full disk fails it.
 * Returns the function that undoes it if that open never came.
 */
function failNextLevelOpen(error: Error): () => void {
  const proto = ClassicLevel.prototype as unknown as { _open(options: unknown): Promise<void> }
  const original = proto._open
  proto._open = async function () {
    proto._open = original
    throw error
  }
  return () => { proto._open = original }
}

describe('a store whose reopen after a quiesce failed', () => {
  it('rejects every later call with TIDEMARK_STORE_OPEN_FAILED carrying the reopen\'s error, not "Database is not open"', async () => {
    const store = await openStore(tempDir())
    const tx = store.transaction()
    tx.value(counts).put('a', 1)
    await tx.commit({ topic: T, partition: 0, offset: 0n })
    const pending = store.transaction()
    pending.value(counts).put('b', 2)
    // Fault injection: the next LevelDB open (the reopen) fails as on a full disk.
    const enospc = Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' })
    const restore = failNextLevelOpen(enospc)
    try {
      await expect(store.quiesce(async () => 'copied')).rejects.toMatchObject({ code: 'TIDEMARK_STORE_OPEN_FAILED', cause: enospc })
    } finally {
      restore()
    }
    const expected = { code: 'TIDEMARK_STORE_OPEN_FAILED', retriable: false, cause: enospc, message: expect.stringMatching(/could not be reopened after a checkpoint: ENOSPC/) }
    await expect(pending.commit({ topic: T, partition: 0, offset: 1n })).rejects.toMatchObject(expected)
    expect(pending.isOpen).toBe(true)
    expect(() => store.transaction()).toThrow(expect.objectContaining(expected))
    await expect(store.getMetadata('owner')).rejects.toMatchObject(expected)
    await expect(store.setMetadata('owner', 1)).rejects.toMatchObject(expected)
    await expect(store.flush()).rejects.toMatchObject(expected)
    await expect(store.hold()).rejects.toMatchObject(expected)
    await expect(store.quiesce(async () => undefined)).rejects.toMatchObject(expected)
    await store.close()
    // The files are intact: once the disk has room, the store opens again.
    const reopened = await openStore(store.path)
    expect(reopened.position(T, 0)).toBe(0n)
    expect(await reopened.transaction().value(counts).get('a')).toBe(1)
  })

  it('a read that waited for the quiesce fails the same way', async () => {
    const store = await openStore(tempDir())
    const enospc = Object.assign(new Error('ENOSPC: no space left on device'), { code: 'ENOSPC' })
    let read: Promise<unknown> | undefined
    const restore = failNextLevelOpen(enospc)
    try {
      const quiesced = store.quiesce(async () => {
        read = store.transaction().value(counts).get('a')
      })
      await expect(quiesced).rejects.toMatchObject({ code: 'TIDEMARK_STORE_OPEN_FAILED' })
    } finally {
      restore()
    }
    await expect(read).rejects.toMatchObject({ code: 'TIDEMARK_STORE_OPEN_FAILED', cause: enospc })
  })
})

// The restore's writer thread (src/snapshot/file-writer.ts): the bytes and
// hashes it writes, how its errors surface, that an abort leaves the
// descriptor untouched afterwards, and that it keeps a process alive only
// while a file is open.
import { execFile } from 'node:child_process'
import { createHash } from 'node:crypto'
import fs from 'node:fs'
import { readFile, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { afterEach, expect, it } from 'vitest'
import { OffThreadFile, terminateWriterThread, WRITER_THREAD_ERROR, writerFaults } from '../../src/snapshot/file-writer.js'
import { tempDir } from '../helpers/tmp.js'

afterEach(() => { writerFaults.beforeWrite = undefined })

/** Writes `chunks` in order, waiting whenever the writer asks to. */
async function writeAll(file: OffThreadFile, chunks: readonly Uint8Array[]): Promise<number> {
  let waits = 0
  for (const c of chunks) {
    const wait = file.write(c)
    if (wait !== undefined) {
      waits++
      await wait
    }
  }
  return waits
}

/** Chunks of odd sizes (1 byte to ~300 KiB, across batch boundaries) of pseudo-random bytes, `total` in all. */
function chunksOf(total: number, seed: number): Buffer[] {
  const out: Buffer[] = []
  let x = seed
  for (let left = total; left > 0;) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0
    const n = Math.min(left, 1 + (x % 300_000))
    const b = Buffer.allocUnsafe(n)
    for (let i = 0; i < n; i++) b[i] = (x >>> (i % 24)) & 0xff
    out.push(b)
    left -= n
  }
  return out
}

it('writes every byte in order and returns the size and SHA-256 of what it wrote, waiting for the worker when it is behind', async () => {
  const dir = tempDir('tidemark-writer-')
  const chunks = chunksOf(9 * 1024 * 1024 + 17, 7)
  const fd = fs.openSync(join(dir, 'a'), 'wx')
  const file = new OffThreadFile(fd)
  const waits = await writeAll(file, chunks)
  const result = await file.end()
  fs.closeSync(fd)
  const whole = Buffer.concat(chunks)
  expect(result).toEqual({ size: whole.byteLength, sha256: createHash('sha256').update(whole).digest('hex') })
  expect((await readFile(join(dir, 'a'))).equals(whole)).toBe(true)
  expect(waits, 'a 9 MiB file is more than the batches the worker may hold').toBeGreaterThan(0)
})

it('an empty file and files written side by side', async () => {
  const dir = tempDir('tidemark-writer-')
  const empty = fs.openSync(join(dir, 'empty'), 'wx')
  expect(await new OffThreadFile(empty).end()).toEqual({ size: 0, sha256: createHash('sha256').digest('hex') })
  fs.closeSync(empty)

  const results = await Promise.all([1, 2, 3].map(async (seed) => {
    const chunks = chunksOf(2 * 1024 * 1024 + seed, seed)
    const fd = fs.openSync(join(dir, `f${seed}`), 'wx')
    const file = new OffThreadFile(fd)
    await writeAll(file, chunks)
    const r = await file.end()
    fs.closeSync(fd)
    return { r, whole: Buffer.concat(chunks), path: join(dir, `f${seed}`) }
  }))
  for (const { r, whole, path } of results) {
    expect(r.sha256).toBe(createHash('sha256').update(whole).digest('hex'))
    expect((await readFile(path)).equals(whole)).toBe(true)
  }
})

it('a write the kernel refuses fails the file with its errno code: a full device (ENOSPC), a descriptor opened read-only (EBADF)', async () => {
  const full = fs.openSync('/dev/full', 'w')
  const onFull = new OffThreadFile(full)
  // The error may surface at a later write() or at end(): both are the same error.
  const error = await writeAll(onFull, chunksOf(4 * 1024 * 1024, 3)).then(() => onFull.end()).then(() => undefined, (e: unknown) => e)
  fs.closeSync(full)
  expect(error).toMatchObject({ code: 'ENOSPC', syscall: 'write' })

  const dir = tempDir('tidemark-writer-')
  fs.writeFileSync(join(dir, 'ro'), 'x')
  const ro = fs.openSync(join(dir, 'ro'), 'r')
  const onRo = new OffThreadFile(ro)
  onRo.write(Buffer.alloc(10))
  await expect(onRo.end()).rejects.toMatchObject({ code: 'EBADF' })
  expect(() => onRo.write(Buffer.alloc(1))).toThrow(/after end\(\)/)
  fs.closeSync(ro)
})

it('after abort() resolves the worker writes nothing more to the descriptor (its number may be reused once closed)', async () => {
  const dir = tempDir('tidemark-writer-')
  const path = join(dir, 'aborted')
  const fd = fs.openSync(path, 'wx')
  const file = new OffThreadFile(fd)
  // Several batches handed over, and not waited for.
  for (const c of chunksOf(3 * 128 * 1024, 5)) file.write(c)
  await file.abort()
  const sizeAtAbort = (await stat(path)).size
  fs.closeSync(fd)
  // Messages are handled in order: once a file opened after the abort is done, so is everything sent before it.
  const later = fs.openSync(join(dir, 'later'), 'wx')
  const next = new OffThreadFile(later)
  next.write(Buffer.alloc(1024 * 1024))
  await next.end()
  fs.closeSync(later)
  expect((await stat(path)).size).toBe(sizeAtAbort)
  expect(sizeAtAbort % (32 * 1024), 'whole writes only').toBe(0)
})

it('the fault seam fails a file before its next batch is handed over: end() rejects with the fault, the file holds only what came before', async () => {
  const dir = tempDir('tidemark-writer-')
  const path = join(dir, 'faulted')
  const fd = fs.openSync(path, 'wx')
  let batches = 0
  writerFaults.beforeWrite = (f) => {
    if (f === fd && ++batches === 3) throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' })
  }
  const file = new OffThreadFile(fd)
  // One chunk of many batches: the fault comes in the middle of a write() and no later batch of it is sent.
  const error = await writeAll(file, [Buffer.alloc(2 * 1024 * 1024, 3)]).then(() => file.end()).then(() => undefined, (e: unknown) => e)
  expect(error).toMatchObject({ code: 'ENOSPC' })
  expect(batches, 'the seam is not asked again after the fault').toBe(3)
  await file.abort()
  fs.closeSync(fd)
  expect((await stat(path)).size).toBe(2 * 128 * 1024)
})

it('a writer thread that dies fails the files in progress with its own code (not an errno, not a corrupt snapshot); the next file starts a new one', async () => {
  const dir = tempDir('tidemark-writer-')
  const fd = fs.openSync(join(dir, 'cut'), 'wx')
  const file = new OffThreadFile(fd)
  file.write(Buffer.alloc(300 * 1024))
  await terminateWriterThread()
  const error = await file.end().then(() => undefined, (e: unknown) => e)
  expect(error).toMatchObject({ code: WRITER_THREAD_ERROR, message: expect.stringMatching(/writer thread exited/) })
  expect(() => file.write(Buffer.alloc(1))).toThrow()
  fs.closeSync(fd)

  const again = fs.openSync(join(dir, 'again'), 'wx')
  const next = new OffThreadFile(again)
  next.write(Buffer.from('still works'))
  expect((await next.end()).size).toBe(11)
  fs.closeSync(again)
  expect(await readFile(join(dir, 'again'), 'utf8')).toBe('still works')
})

it('keeps the process alive while a file is open, and not after', async () => {
  const dir = tempDir('tidemark-writer-')
  const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'fixtures', 'writer-child.ts'), join(dir, 'child')], { timeout: 60_000 })
  const whole = Buffer.alloc(8 * 1024 * 1024, 1)
  // Exiting at all (within the timeout) shows the worker does not keep an idle process alive.
  expect(stdout).toBe(`${whole.byteLength} ${createHash('sha256').update(whole).digest('hex')}\n`)
})

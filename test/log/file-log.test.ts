import { spawn, spawnSync } from 'node:child_process'
import { crc32 } from 'node:zlib'
import { existsSync, readdirSync, readFileSync, readlinkSync, statSync, writeFileSync } from 'node:fs'
import { appendFile, open, readFile, truncate, unlink, type FileHandle } from 'node:fs/promises'
import { hostname } from 'node:os'
import { basename, join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { FILE_LOG_DEFAULTS, NO_REVISION, openFileLog, type FileLogOptions, type LogEntry, type RevisionedLog } from '../../src/log/index.js'
import { tempDir } from '../helpers/tmp.js'
import { spawnScript } from './child.js'
import { revisionedLogSuite } from '../../src/testing/index.js'

const SMALL: FileLogOptions = { segmentBytes: 4096 }

revisionedLogSuite({
  test: it,
  describe,
  name: 'file log',
  async create() {
    const dir = tempDir('tidemark-log-')
    return { log: await openFileLog(dir, SMALL), reopen: () => openFileLog(dir, SMALL) }
  },
  supports: { truncate: true },
})

const HEADER = 16
const RECORD_HEADER = 20

async function readAll(log: RevisionedLog, from = 0n): Promise<LogEntry[]> {
  const out: LogEntry[] = []
  for await (const e of log.read(from)) out.push(e)
  return out
}

function segments(dir: string): string[] {
  return readdirSync(dir).filter((n) => n.endsWith('.seg')).sort()
}

/** A log of `count` entries of `size` bytes in one segment, closed; returns its segment path. */
async function writeEntries(dir: string, count: number, size: number): Promise<string> {
  const log = await openFileLog(dir)
  for (let i = 0; i < count; i++) await log.append(Buffer.alloc(size, i))
  await log.close()
  return join(dir, segments(dir)[0]!)
}

async function flipBit(path: string, position: number, bit = 0): Promise<void> {
  const file = await open(path, 'r+')
  const byte = Buffer.alloc(1)
  await file.read(byte, 0, 1, position)
  byte[0]! ^= 1 << bit
  await file.write(byte, 0, 1, position)
  await file.close()
}

describe('file log', () => {
  it('rolls to new segments, reads across them, and truncation deletes whole segments', async () => {
    const dir = tempDir()
    const log = await openFileLog(dir, SMALL)
    for (let i = 0; i < 120; i++) await log.append(Buffer.from(`entry ${i}`.padEnd(100, '.')))
    const files = segments(dir)
    expect(files.length).toBeGreaterThanOrEqual(3)
    expect((await readAll(log)).map((e) => e.revision)).toEqual(Array.from({ length: 120 }, (_, i) => BigInt(i)))
    const bases = files.map((f) => BigInt(f.slice(0, 20)))
    // A cut inside the second segment keeps that whole segment.
    await log.truncate(bases[1]! + 3n)
    expect(segments(dir)).toEqual(files.slice(1))
    expect(await log.oldest()).toBe(bases[1])
    expect((await readAll(log, bases[1]!))[0]!.revision).toBe(bases[1])
    // The last segment stays even when everything before the tail may go.
    await log.truncate(await log.tail())
    expect(segments(dir)).toEqual(files.slice(-1))
    expect(await log.append(Buffer.from('more'))).toBe(120n)
    await log.close()
  })

  it('writes each record as its documented header (length, revision, zlib CRC-32 of payload and of header) and reads one built by hand', async () => {
    const dir = tempDir()
    const path = await writeEntries(dir, 3, 37)
    const bytes = readFileSync(path)
    for (let i = 0; i < 3; i++) {
      const at = HEADER + i * (RECORD_HEADER + 37)
      const payload = bytes.subarray(at + RECORD_HEADER, at + RECORD_HEADER + 37)
      expect(bytes.readUInt32LE(at)).toBe(37)
      expect(bytes.readBigUInt64LE(at + 4)).toBe(BigInt(i))
      expect(bytes.readUInt32LE(at + 12)).toBe(crc32(payload))
      expect(bytes.readUInt32LE(at + 16)).toBe(crc32(bytes.subarray(at, at + 16)))
      expect(payload.equals(Buffer.alloc(37, i))).toBe(true)
    }
    // A record encoded here with zlib's checksums (every header byte varied) is read as written.
    const payload = Buffer.from('built by hand, not by the file log')
    const record = Buffer.alloc(RECORD_HEADER + payload.length)
    record.writeUInt32LE(payload.length, 0)
    record.writeBigUInt64LE(3n, 4)
    record.writeUInt32LE(crc32(payload), 12)
    record.writeUInt32LE(crc32(record.subarray(0, 16)), 16)
    payload.copy(record, RECORD_HEADER)
    await appendFile(path, record)
    const log = await openFileLog(dir)
    const entries = await readAll(log)
    expect(entries.map((e) => e.revision)).toEqual([0n, 1n, 2n, 3n])
    expect(Buffer.from(entries[3]!.data).equals(payload)).toBe(true)
    await log.close()
  })

  it('reads from any revision after appends made in groups of varying size (its index of positions), also after a reopen', async () => {
    const dir = tempDir()
    let log = await openFileLog(dir, { sync: false })
    const data = (i: number): Buffer => Buffer.alloc(1 + (i * 7) % 50, i % 251)
    let n = 0
    // Groups of 1 to 300 records, some appended while others are still being written.
    for (const size of [1, 300, 63, 64, 65, 2, 129, 200, 1, 175]) {
      const entries = Array.from({ length: size }, (_, j) => data(n + j))
      n += size
      await Promise.all(size === 1 ? [log.appendAll(entries)] : [log.appendAll(entries.slice(0, size >> 1)), log.appendAll(entries.slice(size >> 1))])
    }
    expect(await log.tail()).toBe(BigInt(n))
    for (let pass = 0; pass < 2; pass++) {
      for (const from of [0, 1, 63, 64, 65, 127, 128, 500, 640, n - 1]) {
        const first: LogEntry[] = []
        for await (const e of log.read(BigInt(from))) { first.push(e); if (first.length === 3) break }
        expect(first.map((e) => e.revision)).toEqual(Array.from({ length: Math.min(3, n - from) }, (_, j) => BigInt(from + j)))
        for (const e of first) expect(Buffer.from(e.data).equals(data(Number(e.revision)))).toBe(true)
      }
      await log.close()
      log = await openFileLog(dir, { sync: false })
    }
    await log.close()
  })

  it('hands out small records at most 256 at a time, each read exactly once and in order, from any revision', async () => {
    // A 64 KiB read chunk holds about 2,000 records of 8 bytes: handed out
    // whole, a thousand readers replaying at once held half a gigabyte.
    const dir = tempDir()
    const log = await openFileLog(dir, { sync: false })
    const n = 5000
    const data = (i: number): Buffer => Buffer.from(String(i).padStart(8, '0'))
    for (let i = 0; i < n; i += 1000) await log.appendAll(Array.from({ length: 1000 }, (_, j) => data(i + j)))
    for (const from of [0, 1, 255, 256, 2047, 4999]) {
      const sizes: number[] = []
      let next = from
      for await (const batch of log.readBatches(BigInt(from))) {
        sizes.push(batch.length)
        for (const e of batch) {
          expect(e.revision).toBe(BigInt(next))
          expect(Buffer.from(e.data).equals(data(next))).toBe(true)
          next++
        }
      }
      expect(next).toBe(n)
      expect(Math.max(...sizes)).toBe(Math.min(256, n - from))
    }
    await log.close()
  })

  it('reads a tail no further than its last record: a follower of small appends does not hold 64 KiB chunks', async () => {
    // A thousand partitions tailing their logs read a record or two each
    // time; a 64 KiB chunk per read was most of what such a process allocated.
    const dir = tempDir()
    const log = await openFileLog(dir, { sync: false })
    const payload = (i: number): Buffer => Buffer.alloc(1000, i & 255)
    await log.appendAll(Array.from({ length: 200 }, (_, i) => payload(i)))
    // Every read of a segment, by the bytes it asks for (one call wrapped).
    const probe = await open(join(dir, readdirSync(dir).find((name) => name.endsWith('.seg'))!), 'r')
    const proto = Object.getPrototypeOf(probe) as { read: (...args: unknown[]) => Promise<unknown> }
    await probe.close()
    const read = proto.read
    const asked: number[] = []
    proto.read = function (this: unknown, ...args: unknown[]) {
      asked.push(args[2] as number)
      return read.apply(this, args)
    }
    try {
      for (let i = 200; i < 210; i++) {
        await log.append(payload(i))
        const got: LogEntry[] = []
        for await (const batch of log.readBatches(BigInt(i))) got.push(...batch)
        expect(got.map((e) => e.revision)).toEqual([BigInt(i)])
        expect(Buffer.from(got[0]!.data).equals(payload(i))).toBe(true)
      }
    } finally {
      proto.read = read
    }
    // Each read starts at the indexed record before it (every 64th), so it
    // asks for at most 64 records of 1,020 bytes; a chunk was 64 KiB or more.
    expect(asked.length).toBeGreaterThanOrEqual(10)
    expect(Math.max(...asked)).toBeLessThanOrEqual(64 * 1020)
    // A read of the whole log still reads it in chunks, every record once.
    const all = await readAll(log)
    expect(all.map((e) => Number(e.revision))).toEqual(Array.from({ length: 210 }, (_, i) => i))
    expect(all.every((e, i) => Buffer.from(e.data).equals(payload(i)))).toBe(true)
    await log.close()
  })

  it('reads the tail it writes through the writer\'s descriptor, across a roll and a close', async () => {
    // A process that appends to 1,024 logs and reads their tails held a
    // second descriptor per log for the reads (issue 38).
    const dir = tempDir()
    const log = await openFileLog(dir, { sync: false, segmentBytes: 16 + 200 * 1020 })
    const payload = (i: number): Buffer => Buffer.alloc(1000, i & 255)
    // 200 records of 1,020 bytes fill the segment: the next append rolls.
    await log.appendAll(Array.from({ length: 200 }, (_, i) => payload(i)))
    // The descriptors this process holds open on each segment of the log.
    const held = (): Record<string, number> => {
      const out: Record<string, number> = {}
      for (const fd of readdirSync('/proc/self/fd')) {
        let target: string
        try {
          target = readlinkSync(join('/proc/self/fd', fd))
        } catch {
          continue
        }
        if (target.startsWith(dir) && target.endsWith('.seg')) out[basename(target)] = (out[basename(target)] ?? 0) + 1
      }
      return out
    }
    const first = readdirSync(dir).find((name) => name.endsWith('.seg'))!
    expect(held()).toEqual({ [first]: 1 })
    const reader = log.readBatches(0n)[Symbol.asyncIterator]()
    const got: LogEntry[] = []
    const step = await reader.next()
    got.push(...(step.value as LogEntry[]))
    // Paused between chunks of 64 KiB, the reader holds no descriptor of its own.
    expect(got.length).toBeLessThan(200)
    expect(held()).toEqual({ [first]: 1 })
    // The roll closes the writer's descriptor; the reader opens the segment for the rest.
    await log.append(payload(200))
    const second = readdirSync(dir).filter((name) => name.endsWith('.seg')).sort()[1]!
    expect(held()).toEqual({ [second]: 1 })
    for (let next = await reader.next(); !next.done; next = await reader.next()) {
      got.push(...next.value)
      // (Its own descriptor may still be opening at this point.)
      expect(Object.keys(held()).every((name) => name === first || name === second)).toBe(true)
      expect(Object.values(held()).every((n) => n === 1)).toBe(true)
    }
    expect(got.map((e) => Number(e.revision))).toEqual(Array.from({ length: 200 }, (_, i) => i))
    expect(got.every((e, i) => Buffer.from(e.data).equals(payload(i)))).toBe(true)
    expect(held()).toEqual({ [second]: 1 })
    // A reader paused in the tail segment (and abandoned) does not hold the log's close.
    await log.appendAll(Array.from({ length: 100 }, (_, i) => payload(201 + i)))
    const paused = log.readBatches(200n)[Symbol.asyncIterator]()
    expect((await paused.next()).done).toBe(false)
    await log.close()
    expect(held()).toEqual({})
    await expect(paused.next()).rejects.toMatchObject({ code: 'TIDEMARK_LOG_CLOSED' })
  })

  it('reports a flipped bit in a record payload with the revision of the record', async () => {
    const dir = tempDir()
    const path = await writeEntries(dir, 10, 50)
    const log = await openFileLog(dir)
    await flipBit(path, HEADER + 4 * (RECORD_HEADER + 50) + RECORD_HEADER + 7, 3)
    await expect(readAll(log)).rejects.toMatchObject({ code: 'TIDEMARK_LOG_CORRUPT', details: { revision: 4n, path } })
    await expect(readAll(log)).rejects.toThrow(/corrupt at revision 4: .*payload fails its checksum/)
    // Entries before it still read.
    const before: bigint[] = []
    for await (const e of log.read(0n, { end: 4n })) before.push(e.revision)
    expect(before).toEqual([0n, 1n, 2n, 3n])
    await log.close()
    // Opening scans the last segment and refuses to append after corruption.
    await expect(openFileLog(dir)).rejects.toMatchObject({ code: 'TIDEMARK_LOG_CORRUPT', details: { revision: 4n } })
  })

  it('reports a flipped bit in a record length as corruption, not as a torn tail', async () => {
    const dir = tempDir()
    const path = await writeEntries(dir, 10, 50)
    // The length field of the last record: cutting it as torn would lose an acknowledged entry.
    await flipBit(path, HEADER + 9 * (RECORD_HEADER + 50) + 2, 6)
    await expect(openFileLog(dir)).rejects.toMatchObject({ code: 'TIDEMARK_LOG_CORRUPT', details: { revision: 9n } })
    expect(statSync(path).size).toBe(HEADER + 10 * (RECORD_HEADER + 50))
  })

  it('cuts a torn tail on open, and appends continue after the last whole record', async () => {
    const dir = tempDir()
    const path = await writeEntries(dir, 10, 50)
    // readOnly: a handle that may append shares this process's core with the
    // writer opened below, and a core that read the records cut here (which
    // only tampering does to acknowledged records) would not look again.
    const reader = await openFileLog(dir, { readOnly: true })
    await truncate(path, HEADER + 9 * (RECORD_HEADER + 50) + 31)
    // A reader (no lock) treats the partial record as not there yet.
    expect((await readAll(reader)).map((e) => e.revision)).toEqual([0n, 1n, 2n, 3n, 4n, 5n, 6n, 7n, 8n])
    const log = await openFileLog(dir)
    expect(statSync(path).size).toBe(HEADER + 9 * (RECORD_HEADER + 50))
    expect(await log.tail()).toBe(9n)
    expect(await log.appendConditionally(Buffer.from('after the tear'), 8n)).toBe(9n)
    const entries = await readAll(reader)
    expect(entries).toHaveLength(10)
    expect(Buffer.from(entries[9]!.data).toString()).toBe('after the tear')
    // Space a crash extended but never wrote is zeros: cut as well.
    await appendFile(path, Buffer.alloc(300))
    const again = await openFileLog(dir)
    expect(await again.append(Buffer.from('x'))).toBe(10n)
    expect(await readAll(again)).toHaveLength(11)
    await Promise.all([reader.close(), log.close(), again.close()])
  })

  it('a torn tail after SIGKILL of a writer is cut, acknowledged entries survive, and appends continue', async () => {
    const dir = tempDir()
    const size = 64 * 1024
    const writer = spawnScript('test/log/fixtures/append-loop.ts', [dir, String(size)])
    // Meanwhile this process reads what the other one appends.
    await writer.waitFor((line) => line === '3')
    const reader = await openFileLog(dir)
    let seen = 0n
    while (writer.lines.length < 30 && writer.proc.exitCode === null) {
      for await (const e of reader.read(seen)) {
        expect(e.revision).toBe(seen)
        expect(e.data.byteLength).toBe(size)
        expect(e.data.every((b) => b === Number(e.revision % 251n))).toBe(true)
        seen += 1n
      }
    }
    writer.proc.kill('SIGKILL')
    await writer.exited
    const acked = BigInt(writer.lines.at(-1)!)
    // The kill lands anywhere, often while the writer holds the append lock.
    // Linux finishes a write(2) to the page cache even for a killed process,
    // so the record in flight is torn here the way an interrupted write or a
    // power failure tears it: a whole header and part of the payload.
    const path = join(dir, segments(dir).at(-1)!)
    // A group's write(2) can itself stop short under SIGKILL (the kernel
    // checks for a fatal signal between pages), leaving part of a record that
    // was never acknowledged; cut it so that the tear below is the only one.
    const count = BigInt(Math.floor((statSync(path).size - HEADER) / (RECORD_HEADER + size)))
    const end = HEADER + Number(count) * (RECORD_HEADER + size)
    await truncate(path, end)
    const torn = Buffer.alloc(RECORD_HEADER + size, Number(count % 251n))
    const header = Buffer.alloc(RECORD_HEADER)
    header.writeUInt32LE(size, 0)
    header.writeBigUInt64LE(count, 4)
    header.writeUInt32LE(crc32(torn.subarray(RECORD_HEADER)), 12)
    header.writeUInt32LE(crc32(header.subarray(0, 16)), 16)
    header.copy(torn)
    await appendFile(path, torn.subarray(0, RECORD_HEADER + size / 2))
    const log = await openFileLog(dir, { lockTimeoutMs: 5000 })
    expect(statSync(path).size).toBe(end)
    const entries = await readAll(log)
    expect(BigInt(entries.length)).toBe(count)
    expect(count >= acked + 1n).toBe(true)
    for (const e of entries) expect(e.data.every((b) => b === Number(e.revision % 251n))).toBe(true)
    const next = await log.append(Buffer.from('after the crash'))
    expect(next).toBe(count)
    await Promise.all([log.close(), reader.close()])
    expect(existsSync(join(dir, 'append.lock'))).toBe(false)
  })

  it('SIGKILL of two processes during group commit (4 writers each) loses no acknowledged append', async () => {
    const dir = tempDir()
    const size = 3000
    // Two processes share the lock and flush concurrently; small segments so that rolls happen under the kill too.
    const writers = ['a', 'b'].map((tag) => spawnScript('test/log/fixtures/group-append-loop.ts', [dir, '4', tag, String(size), String(64 * 1024)]))
    await Promise.all(writers.map((w) => w.waitFor((line) => line.startsWith(`${w === writers[0] ? 'a' : 'b'}:`) && Number(line.split(' ')[1]) > 200)))
    // One dies first while the other keeps appending (it must break the dead one's lock), then the other.
    writers[0]!.proc.kill('SIGKILL')
    await writers[0]!.exited
    const resume = writers[1]!.lines.length
    await writers[1]!.waitFor((line) => line.startsWith('b:'), resume + 50)
    writers[1]!.proc.kill('SIGKILL')
    await writers[1]!.exited
    const log = await openFileLog(dir, { lockTimeoutMs: 5000, segmentBytes: 64 * 1024 })
    const stored = new Map<string, bigint>()
    for (const e of await readAll(log)) stored.set(Buffer.from(e.data).toString().replace(/\.+$/, ''), e.revision)
    let acked = 0
    for (const w of writers) {
      for (const line of w.lines) {
        const [text, revision] = line.split(' ')
        if (revision === undefined) continue
        acked++
        expect(stored.get(text!), text).toBe(BigInt(revision))
      }
    }
    expect(acked).toBeGreaterThan(250)
    expect(segments(dir).length).toBeGreaterThan(5)
    expect(await log.append(Buffer.from('after'))).toBe(BigInt(stored.size))
    await log.close()
  })

  it('breaks the append lock of a dead process and waits for a live one', async () => {
    const dir = tempDir()
    const log = await openFileLog(dir, { lockTimeoutMs: 100 })
    const lock = join(dir, 'append.lock')
    const dead = spawnSync(process.execPath, ['-e', '']).pid!
    writeFileSync(lock, JSON.stringify({ pid: dead, host: hostname(), nonce: 'dead' }))
    expect(await log.append(Buffer.from('a'))).toBe(0n)
    // The log keeps the lock while it has work, and lets it go right after.
    await lockReleased(lock)
    writeFileSync(lock, JSON.stringify({ pid: process.pid, host: hostname(), nonce: 'alive' }))
    await expect(log.append(Buffer.from('b'))).rejects.toMatchObject({ code: 'TIDEMARK_LOG_LOCKED', retriable: true, details: { holder: { pid: process.pid } } })
    expect(JSON.parse(await readFile(lock, 'utf8')).nonce).toBe('alive')
    writeFileSync(lock, JSON.stringify({ pid: process.pid, host: 'another-host', nonce: 'remote' }))
    await expect(log.append(Buffer.from('b'))).rejects.toMatchObject({ code: 'TIDEMARK_LOG_LOCKED' })
    await truncate(lock, 0)
    await expect(log.append(Buffer.from('b'))).rejects.toThrow(/locked by an unknown process/)
    await unlink(lock)
    expect(await log.append(Buffer.from('b'))).toBe(1n)
    expect(await log.appendConditionally(Buffer.from('c'), NO_REVISION)).toBeUndefined()
    await log.close()
  })

  it('reports file-system failures as TIDEMARK_LOG_UNAVAILABLE', async () => {
    const dir = tempDir()
    const file = join(dir, 'a-file')
    writeFileSync(file, 'not a directory')
    await expect(openFileLog(join(file, 'log'))).rejects.toMatchObject({ code: 'TIDEMARK_LOG_UNAVAILABLE', retriable: false })
  })

  it('validates its options once, with frozen defaults', async () => {
    const dir = tempDir()
    expect(Object.isFrozen(FILE_LOG_DEFAULTS)).toBe(true)
    await expect(openFileLog('relative/dir')).rejects.toThrow(RangeError)
    await expect(openFileLog(dir, { segmentBytes: 10 })).rejects.toThrow(/segmentBytes \(10\) must be an integer from 4096/)
    await expect(openFileLog(dir, { sync: 'yes' as unknown as boolean })).rejects.toThrow(TypeError)
    const log = await openFileLog(dir, { maxRecordBytes: 10 })
    await expect(log.append(Buffer.alloc(11))).rejects.toThrow(/data is 11 bytes, more than maxRecordBytes \(10\)/)
    expect(Object.isFrozen(log.options)).toBe(true)
    await log.close()
    await expect(openFileLog(dir, { readOnly: 1 as unknown as boolean })).rejects.toThrow(/readOnly must be a boolean/)
  })

  it('a readOnly log takes no lock while a writer in another process holds it, and creates and cuts nothing', async () => {
    const dir = tempDir()
    const path = await writeEntries(dir, 4, 10)
    // The last record torn: a reader leaves it to the writer.
    await truncate(path, HEADER + 3 * (RECORD_HEADER + 10) + RECORD_HEADER + 5)
    const size = statSync(path).size
    const holder = spawn(process.execPath, ['-e', 'process.stdin.resume()'], { stdio: ['pipe', 'ignore', 'ignore'] })
    const exited = new Promise((resolve) => holder.on('exit', resolve))
    onTestFinished(async () => {
      holder.kill()
      await exited
    })
    const lock = join(dir, 'append.lock')
    const held = JSON.stringify({ pid: holder.pid, host: hostname(), nonce: 'writer' })
    writeFileSync(lock, held)
    const before = readdirSync(dir).sort()
    // A writer waits for the lock; a reader does not take it at all.
    await expect(openFileLog(dir, { lockTimeoutMs: 50 })).rejects.toMatchObject({ code: 'TIDEMARK_LOG_LOCKED' })
    const reader = await openFileLog(dir, { readOnly: true, lockTimeoutMs: 50 })
    expect(await reader.tail()).toBe(3n)
    expect((await readAll(reader)).map((e) => e.data.byteLength)).toEqual([10, 10, 10])
    await expect(reader.append(Buffer.from('x'))).rejects.toThrow(TypeError)
    await expect(reader.appendConditionally(Buffer.from('x'), 2n)).rejects.toThrow(/readOnly/)
    await expect(reader.truncate(1n)).rejects.toThrow(TypeError)
    await reader.close()
    expect(readFileSync(lock, 'utf8')).toBe(held)
    expect(readdirSync(dir).sort()).toEqual(before)
    expect(statSync(path).size).toBe(size)
    // Nor does it create a log that is not there.
    const missing = join(tempDir(), 'no-log')
    await expect(openFileLog(missing, { readOnly: true })).rejects.toMatchObject({ code: 'TIDEMARK_LOG_UNAVAILABLE' })
    expect(existsSync(missing)).toBe(false)
  })
})

/** The file log releases its lock one event-loop turn after its work ran out: wait for that, turn by turn. */
async function lockReleased(lock: string): Promise<void> {
  for (let turn = 0; existsSync(lock); turn++) {
    if (turn > 10_000) throw new Error(`${lock} was not released`)
    await new Promise(setImmediate)
  }
}

type AsyncMethod = (...args: unknown[]) => Promise<unknown>

/**
 * Replaces one FileHandle method for every handle until the current test
 * finishes (the class is not exported; its prototype is reached through a
 * handle). `replacement` gets the original bound to the handle, and the arguments.
 */
async function onFileHandle(name: 'datasync' | 'write', replacement: (original: AsyncMethod, args: unknown[]) => Promise<unknown>): Promise<void> {
  const probe = await open(import.meta.filename, 'r')
  const proto = Object.getPrototypeOf(probe) as Record<typeof name, AsyncMethod>
  await probe.close()
  const original = proto[name]
  proto[name] = function (this: FileHandle, ...args: unknown[]) {
    return replacement((...a) => original.apply(this, a), args)
  }
  onTestFinished(() => {
    proto[name] = original
  })
}

/** Counts calls of a FileHandle method. */
async function countCalls(name: 'datasync' | 'write'): Promise<{ count: number }> {
  const counter = { count: 0 }
  await onFileHandle(name, (original, args) => {
    counter.count++
    return original(...args)
  })
  return counter
}

/**
 * fdatasync calls: one per group of appends with `sync: true`, or fewer:
 * groups written while a flush runs share the next one (see #startFlush),
 * so only appends awaited one group at a time give an exact count.
 */
const countFlushes = (): Promise<{ count: number }> => countCalls('datasync')

/** FileHandle writes: one per group (writeAll writes a group's records in one call to a regular file). */
const countWrites = (): Promise<{ count: number }> => countCalls('write')

const entry = (i: number, size = 20 + ((i * 37) % 180)): Buffer => Buffer.alloc(size, i % 251)

/** The test's second FileHandle write fails with EIO; the others go through. */
async function failSecondWrite(): Promise<void> {
  let writes = 0
  await onFileHandle('write', (original, args) => {
    writes++
    return writes === 2 ? Promise.reject(Object.assign(new Error('injected EIO'), { code: 'EIO' })) : original(...args)
  })
}

describe('file log: group commit', () => {
  it('concurrent appends form groups, get consecutive revisions in call order, and read back exactly', async () => {
    const dir = tempDir()
    const log = await openFileLog(dir)
    expect(await log.append(entry(0))).toBe(0n)
    const flushes = await countFlushes()
    const writes = await countWrites()
    // Issued in one tick: 25 000 entries make groups of 10 000, 10 000 and 5 000 (the entry cap).
    const count = 25_000
    const revisions = await Promise.all(Array.from({ length: count }, (_, i) => log.append(entry(i + 1))))
    expect(revisions).toEqual(Array.from({ length: count }, (_, i) => BigInt(i + 1)))
    expect(writes.count).toBe(3)
    // The first group has a flush of its own; the other two share the next
    // one when both were written while it ran.
    expect(flushes.count).toBeGreaterThanOrEqual(2)
    expect(flushes.count).toBeLessThanOrEqual(3)
    const entries = await readAll(log)
    expect(entries).toHaveLength(count + 1)
    for (const [i, e] of entries.entries()) {
      expect(e.revision).toBe(BigInt(i))
      expect(Buffer.from(e.data).equals(entry(i))).toBe(true)
    }
    // Another handle, and a reopened log, see the same bytes.
    const other = await openFileLog(dir)
    expect((await readAll(other)).map((e) => Buffer.from(e.data).toString('hex'))).toEqual(entries.map((e) => Buffer.from(e.data).toString('hex')))
    await Promise.all([log.close(), other.close()])
  })

  it('caps a group by bytes: large entries are written a few at a time', async () => {
    const dir = tempDir()
    const log = await openFileLog(dir)
    const flushes = await countFlushes()
    const writes = await countWrites()
    // 4 MiB per group: three 1 MiB records fit, a fourth would not.
    const big = Array.from({ length: 10 }, (_, i) => Buffer.alloc(1024 * 1024, i))
    expect(await Promise.all(big.map((b) => log.append(b)))).toEqual(big.map((_, i) => BigInt(i)))
    expect(writes.count).toBe(4)
    // Groups written while a flush runs share the next one.
    expect(flushes.count).toBeGreaterThanOrEqual(2)
    expect(flushes.count).toBeLessThanOrEqual(4)
    const entries = await readAll(log)
    expect(entries.every((e, i) => Buffer.from(e.data).equals(big[i]!))).toBe(true)
    await log.close()
  })

  it('judges conditional appends in a group against the entries before them', async () => {
    const dir = tempDir()
    const log = await openFileLog(dir)
    const flushes = await countFlushes()
    const text = (s: string): Buffer => Buffer.from(s)
    // On an empty log: the first NO_REVISION wins, a second one loses.
    expect(await Promise.all([
      log.appendConditionally(text('first'), NO_REVISION),
      log.appendConditionally(text('also first'), NO_REVISION),
      log.appendConditionally(text('second'), 0n),
    ])).toEqual([0n, undefined, 1n])
    expect(await Promise.all([
      log.appendConditionally(text('a'), 1n), // wins: 2
      log.appendConditionally(text('b'), 1n), // loses to a
      log.append(text('c')), // 3
      log.appendConditionally(text('d'), 3n), // wins after c: 4
      log.appendConditionally(text('e'), 2n), // loses: c and d came after 2
      log.appendConditionally(text('f'), 4n), // a loser before it changes nothing: 5
      log.appendConditionally(text('g'), NO_REVISION), // loses
      log.append(text('h')), // 6
      log.appendConditionally(text('i'), 99n), // loses
    ])).toEqual([2n, undefined, 3n, 4n, undefined, 5n, undefined, 6n, undefined])
    // A group where every entry loses writes nothing.
    expect(await Promise.all([log.appendConditionally(text('x'), 5n), log.appendConditionally(text('y'), 0n)])).toEqual([undefined, undefined])
    expect(flushes.count).toBe(2)
    expect(await log.tail()).toBe(7n)
    expect((await readAll(log)).map((e) => Buffer.from(e.data).toString())).toEqual(['first', 'second', 'a', 'c', 'd', 'f', 'h'])
    await log.close()
  })

  it('a group that crosses segment boundaries is split between segments with whole records, and reads back intact', async () => {
    const dir = tempDir()
    const log = await openFileLog(dir, SMALL)
    await log.append(entry(0, 3000))
    // About 38 KiB in one group: it fills the first segment and rolls about nine times.
    const count = 300
    const revisions = await Promise.all(Array.from({ length: count }, (_, i) => {
      // A conditional entry in the middle, judged across a roll.
      if (i === 150) return log.appendConditionally(entry(151), 150n)
      if (i === 151) return log.appendConditionally(Buffer.from('loser'), 150n)
      return log.append(entry(i < 151 ? i + 1 : i))
    }))
    expect(revisions.filter((r) => r === undefined)).toHaveLength(1)
    expect(revisions.filter((r) => r !== undefined)).toEqual(Array.from({ length: count - 1 }, (_, i) => BigInt(i + 1)))
    const files = segments(dir)
    expect(files.length).toBeGreaterThanOrEqual(9)
    // Each sealed segment reached segmentBytes, and its last record started before it.
    for (const name of files.slice(0, -1)) {
      const size = statSync(join(dir, name)).size
      expect(size).toBeGreaterThanOrEqual(4096)
      expect(size).toBeLessThan(4096 + RECORD_HEADER + 3000)
    }
    for (const reader of [log, await openFileLog(dir, SMALL)]) {
      const entries = await readAll(reader)
      expect(entries).toHaveLength(count)
      for (const [i, e] of entries.entries()) expect(Buffer.from(e.data).equals(i === 0 ? entry(0, 3000) : entry(i))).toBe(true)
      // Reads that start in the middle of a segment the group wrote.
      expect((await readAll(reader, 200n))[0]!.revision).toBe(200n)
      await reader.close()
    }
  })

  it('cuts a torn group on open, keeping its whole records', async () => {
    const dir = tempDir()
    const log = await openFileLog(dir)
    await Promise.all(Array.from({ length: 100 }, (_, i) => log.append(Buffer.alloc(50, i))))
    await log.close()
    const path = join(dir, segments(dir)[0]!)
    // As if the process died while the group's write was in flight: 60 whole records and part of the 61st.
    await truncate(path, HEADER + 60 * (RECORD_HEADER + 50) + 33)
    const reopened = await openFileLog(dir)
    expect(statSync(path).size).toBe(HEADER + 60 * (RECORD_HEADER + 50))
    expect((await readAll(reopened)).map((e) => e.data[0])).toEqual(Array.from({ length: 60 }, (_, i) => i))
    expect(await reopened.append(Buffer.from('next'))).toBe(60n)
    await reopened.close()
  })

  it('a failed group write fails every caller in it, losers included, and the next group takes the same revisions', async () => {
    const dir = tempDir()
    const log = await openFileLog(dir)
    expect(await log.append(Buffer.from('base'))).toBe(0n)
    let armed = true
    await onFileHandle('write', (original, args) => {
      if (!armed) return original(...args)
      armed = false
      return Promise.reject(Object.assign(new Error('injected EIO'), { code: 'EIO' }))
    })
    const results = await Promise.allSettled([
      log.append(Buffer.from('a')),
      // Would lose to a; but a was never written, so it must not be told that it lost.
      log.appendConditionally(Buffer.from('b'), 0n),
    ])
    for (const r of results) expect(r).toMatchObject({ status: 'rejected', reason: { code: 'TIDEMARK_LOG_UNAVAILABLE', retriable: true, details: { op: 'append' } } })
    expect(await Promise.all([log.appendConditionally(Buffer.from('c'), 0n), log.append(Buffer.from('d'))])).toEqual([1n, 2n])
    expect((await readAll(log)).map((e) => Buffer.from(e.data).toString())).toEqual(['base', 'c', 'd'])
    await log.close()
  })

  it('a group that fails in its second segment acknowledges the records written in the first', async () => {
    const dir = tempDir()
    const log = await openFileLog(dir, SMALL)
    await failSecondWrite()
    // 1 KiB records: four fill the first segment, the fifth goes to the second one.
    const results = await Promise.allSettled(Array.from({ length: 6 }, (_, i) => log.append(Buffer.alloc(1000, i))))
    expect(results.slice(0, 4)).toEqual([0n, 1n, 2n, 3n].map((value) => ({ status: 'fulfilled', value })))
    for (const r of results.slice(4)) expect(r).toMatchObject({ status: 'rejected', reason: { code: 'TIDEMARK_LOG_UNAVAILABLE' } })
    expect(segments(dir)).toHaveLength(2)
    expect(await log.append(Buffer.alloc(1000, 9))).toBe(4n)
    expect((await readAll(log)).map((e) => e.data[0])).toEqual([0, 1, 2, 3, 9])
    await log.close()
  })

  // fileLogSink's way to append a delivery batch: as that many appends made
  // together, in call order with appends around it, one promise for all.
  it('appendAll joins the groups of appends made with it, in call order, and answers with the last revision', async () => {
    const dir = tempDir()
    const log = await openFileLog(dir)
    const flushes = await countFlushes()
    // The first group's flush runs until the second group is written: the
    // second group waits for the next flush, which starts when the first
    // ends (one fdatasync at a time per file; see #startFlush). The answer is
    // the last entry's revision whichever group is answered last.
    let secondWritten!: () => void
    const second = new Promise<void>((resolve) => { secondWritten = resolve })
    let writes = 0
    await onFileHandle('write', async (original, args) => {
      const result = await original(...args)
      if (++writes === 2) secondWritten()
      return result
    })
    let syncs = 0
    let overlapping = 0
    await onFileHandle('datasync', async (original, args) => {
      if (++syncs === 1) await second
      overlapping++
      try {
        expect(overlapping).toBe(1)
        return await original(...args)
      } finally {
        overlapping--
      }
    })
    const batch = Array.from({ length: 12_000 }, (_, i) => entry(i + 1))
    const [first, last, after] = await Promise.all([log.append(entry(0)), log.appendAll(batch), log.append(entry(12_001))])
    expect([first, last, after]).toEqual([0n, 12_000n, 12_001n])
    // 12 002 entries in one tick: the 10 000-entry cap makes two groups, as separate appends would.
    expect(flushes.count).toBe(2)
    const entries = await readAll(log)
    expect(entries).toHaveLength(12_002)
    for (const [i, e] of entries.entries()) expect(Buffer.from(e.data).equals(entry(i))).toBe(true)
    await expect(log.appendAll([])).rejects.toThrow(TypeError)
    await expect(log.appendAll([Buffer.from('a'), 'b' as unknown as Uint8Array])).rejects.toThrow(/every entry must be a Uint8Array/)
    await expect(log.appendAll([Buffer.alloc(FILE_LOG_DEFAULTS.maxRecordBytes + 1)])).rejects.toThrow(RangeError)
    // Nothing of a refused batch was written.
    expect(await log.tail()).toBe(12_002n)
    await log.close()
    await expect(log.appendAll([Buffer.from('late')])).rejects.toMatchObject({ code: 'TIDEMARK_LOG_CLOSED' })
  })

  it('appendAll rejects with a failed write and keeps what a first group wrote', async () => {
    const dir = tempDir()
    const log = await openFileLog(dir, SMALL)
    await failSecondWrite()
    // As above: four 1 KiB records fill the first segment, the write to the second one fails.
    await expect(log.appendAll(Array.from({ length: 6 }, (_, i) => Buffer.alloc(1000, i)))).rejects.toMatchObject({ code: 'TIDEMARK_LOG_UNAVAILABLE' })
    expect(await log.appendAll([Buffer.alloc(1000, 9)])).toBe(4n)
    expect((await readAll(log)).map((e) => e.data[0])).toEqual([0, 1, 2, 3, 9])
    await log.close()
  })

  it('keeps call order around truncate: an append after it does not join the group before it', async () => {
    const dir = tempDir()
    const log = await openFileLog(dir, SMALL)
    const first = log.append(Buffer.from('first'))
    // The tail is 1 when the truncation runs, whatever is called after it.
    const cut = log.truncate(2n)
    const second = log.append(Buffer.from('second'))
    await expect(cut).rejects.toThrow(/before \(2\) is past the tail \(1\)/)
    expect(await Promise.all([first, second])).toEqual([0n, 1n])
    await log.close()
  })
})

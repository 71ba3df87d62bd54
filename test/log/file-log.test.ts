import { spawnSync } from 'node:child_process'
import { crc32 } from 'node:zlib'
import { existsSync, readdirSync, statSync, writeFileSync } from 'node:fs'
import { appendFile, open, readFile, truncate, unlink } from 'node:fs/promises'
import { hostname } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { FILE_LOG_DEFAULTS, NO_REVISION, openFileLog, type FileLogOptions, type LogEntry, type RevisionedLog } from '../../src/log/index.js'
import { tempDir } from '../helpers/tmp.js'
import { spawnScript } from './child.js'
import { logSuite } from './log.suite.js'

const SMALL: FileLogOptions = { segmentBytes: 4096 }

logSuite({
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
    const reader = await openFileLog(dir)
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
    const end = statSync(path).size
    const count = BigInt((end - HEADER) / (RECORD_HEADER + size))
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
    expect(existsSync(join(dir, 'append.lock'))).toBe(false)
    await Promise.all([log.close(), reader.close()])
  })

  it('breaks the append lock of a dead process and waits for a live one', async () => {
    const dir = tempDir()
    const log = await openFileLog(dir, { lockTimeoutMs: 100 })
    const lock = join(dir, 'append.lock')
    const dead = spawnSync(process.execPath, ['-e', '']).pid!
    writeFileSync(lock, JSON.stringify({ pid: dead, host: hostname(), nonce: 'dead' }))
    expect(await log.append(Buffer.from('a'))).toBe(0n)
    expect(existsSync(lock)).toBe(false)
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
  })
})

import { openSync, readdirSync, readSync, rmSync, writeSync, closeSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { describe, expect, it } from 'vitest'
import { tempDir } from '../helpers/tmp.js'
import { fixture, tidemark, tidemarkWith, tree } from './helpers.js'

const PARTITION = ['--job', 'j', '--partition', '0']

interface ShownFile { name: string; size: number; object: string; offset: number; sha256: string }

/** Flips bits (mask) of one byte of a file's tar object, by default its data's first. */
function flipByte(snapshotsDir: string, file: ShownFile, at = file.offset, mask = 0xff): void {
  const fd = openSync(join(snapshotsDir, 'j', '0', file.object), 'r+')
  try {
    const byte = Buffer.alloc(1)
    readSync(fd, byte, 0, 1, at)
    byte[0] = byte[0]! ^ mask
    writeSync(fd, byte, 0, 1, at)
  } finally {
    closeSync(fd)
  }
}

describe('snapshots list and show', () => {
  it('list prints a table, newest first; show prints one manifest, as text or --json', async () => {
    const { url, snapshotIds } = await fixture()
    const listed = await tidemark('snapshots', 'list', url, ...PARTITION)
    expect(listed).toMatchObject({ code: 0, stderr: '' })
    const rows = listed.stdout.trim().split('\n')
    expect(rows[0]).toMatch(/^id +created +kind +state bytes +files +positions$/)
    expect(rows.slice(1).map((r) => r.split(/ +/)[0])).toEqual(snapshotIds)
    expect(rows[1]).toMatch(/ (full|incremental) .* t\/0@43$/)
    expect(rows[2]).toMatch(/ full .* t\/0@41$/)

    const shown = await tidemark('snapshots', 'show', url, snapshotIds[1]!, ...PARTITION, '--json')
    expect(JSON.parse(shown.stdout)).toMatchObject({ id: snapshotIds[1], job: 'j', partition: '0', full: true, positions: [{ offset: '41' }] })
    const text = await tidemark('snapshots', 'show', url, snapshotIds[0]!, ...PARTITION)
    expect(text.stdout).toMatch(new RegExp(`^snapshot +${snapshotIds[0]} \\((full|incremental, base \\S+)\\)$`, 'm'))
    expect(text.stdout).toMatch(/^CURRENT +16 +[0-9a-f]{64} +data\//m)

    const empty = pathToFileURL(tempDir()).href
    expect(await tidemark('snapshots', 'list', empty, ...PARTITION)).toEqual({ code: 0, stdout: 'no snapshots of j/0\n', stderr: `tidemark: ${empty} holds no snapshots of any job\n` })
  })

  it('show of an id that does not exist exits 1 with TIDEMARK_SNAPSHOT_NOT_FOUND', async () => {
    const { url } = await fixture()
    const result = await tidemark('snapshots', 'show', url, '0000000009-000000000009', ...PARTITION)
    expect(result).toEqual({ code: 1, stdout: '', stderr: 'tidemark: TIDEMARK_SNAPSHOT_NOT_FOUND: snapshot 0000000009-000000000009 of j/0 does not exist\n' })
  })
})

describe('snapshots verify', () => {
  it('checks the newest, one id or --all, one report per snapshot, with progress; writes nothing', async () => {
    const { dir, url, snapshotIds } = await fixture()
    const before = tree(join(dir, 'snapshots'))
    const newest = await tidemark('snapshots', 'verify', url, ...PARTITION)
    expect(newest).toMatchObject({ code: 0, stdout: expect.stringMatching(new RegExp(`^ok      ${snapshotIds[0]}: \\d+ files, \\d+ bytes\n$`)) })
    expect(newest.stderr).toMatch(/^verify: (\d+)\/\1 bytes$/m)
    const one = await tidemark('snapshots', 'verify', url, snapshotIds[1]!, ...PARTITION, '--json')
    expect(JSON.parse(one.stdout)).toEqual([{ id: snapshotIds[1], ok: true, files: expect.any(Number), bytes: expect.any(Number), problems: [] }])
    const all = await tidemark('snapshots', 'verify', url, '--all', ...PARTITION, '--json')
    expect(all.code).toBe(0)
    expect(JSON.parse(all.stdout)).toMatchObject(snapshotIds.map((id) => ({ id, ok: true })))
    expect(tree(join(dir, 'snapshots'))).toEqual(before)
  })

  it('a file whose bytes changed fails its SHA-256 and a missing object is reported: exit 1, the sound snapshot still ok', async () => {
    const { dir, url, snapshotIds } = await fixture()
    const newest = JSON.parse((await tidemark('snapshots', 'show', url, snapshotIds[0]!, ...PARTITION, '--json')).stdout) as { files: ShownFile[] }
    const older = JSON.parse((await tidemark('snapshots', 'show', url, snapshotIds[1]!, ...PARTITION, '--json')).stdout) as { files: ShownFile[] }
    // A file of the newest snapshot's own object, which the older one does not reference.
    const olderObjects = new Set(older.files.map((f) => f.object))
    const victim = newest.files.find((f) => f.size > 0 && !olderObjects.has(f.object))!
    flipByte(join(dir, 'snapshots'), victim)

    const result = await tidemark('snapshots', 'verify', url, '--all', ...PARTITION)
    expect(result.code).toBe(1)
    expect(result.stdout).toContain(`FAILED  ${snapshotIds[0]}: 1 problem\n  checksum-mismatch: file ${victim.name} (object ${victim.object} at ${victim.offset}) has SHA-256 `)
    expect(result.stdout).toContain(`ok      ${snapshotIds[1]}: `)

    rmSync(join(dir, 'snapshots', 'j', '0', victim.object))
    const missing = await tidemark('snapshots', 'verify', url, snapshotIds[0]!, ...PARTITION, '--json')
    expect(missing.code).toBe(1)
    expect(JSON.parse(missing.stdout)).toMatchObject([{ id: snapshotIds[0], ok: false, problems: [{ reason: 'object-missing', what: `j/0/${victim.object}` }] }])
  })

  // What a restore refuses beside a file's bytes (archive.ts): a damaged
  // tar header, also where tar's own checksum does not look (the checksum
  // field's terminator), and damaged padding. verify reports each of them.
  it('a damaged tar header or padding is reported (archive-corrupt), as a restore would refuse it', async () => {
    const { dir, url, snapshotIds } = await fixture()
    const newest = JSON.parse((await tidemark('snapshots', 'show', url, snapshotIds[0]!, ...PARTITION, '--json')).stdout) as { files: ShownFile[] }
    const victim = newest.files.find((f) => f.size % 512 !== 0)!
    const header = victim.offset - 512
    const spots: Array<[string, number, number]> = [
      ['name', header, 0x01],
      ['size field', header + 124 + 5, 0x01],
      ['checksum field terminator', header + 154, 0x08],
      ['type', header + 156, 0x02],
      ['padding', victim.offset + victim.size, 0x40],
    ]
    for (const [what, at, mask] of spots) {
      flipByte(join(dir, 'snapshots'), victim, at, mask)
      const result = await tidemark('snapshots', 'verify', url, snapshotIds[0]!, ...PARTITION, '--json')
      expect(result.code, what).toBe(1)
      expect(JSON.parse(result.stdout), what).toMatchObject([{ id: snapshotIds[0], ok: false, problems: [{ reason: 'archive-corrupt', what: victim.name }] }])
      flipByte(join(dir, 'snapshots'), victim, at, mask)
    }
    expect((await tidemark('snapshots', 'verify', url, snapshotIds[0]!, ...PARTITION)).code).toBe(0)
  })

  it('an object longer than its manifest says is reported (object-size); no snapshots at all exits 1', async () => {
    const { dir, url, snapshotIds } = await fixture()
    const newest = JSON.parse((await tidemark('snapshots', 'show', url, snapshotIds[0]!, ...PARTITION, '--json')).stdout) as { objects: { key: string }[] }
    const path = join(dir, 'snapshots', 'j', '0', newest.objects.at(-1)!.key)
    const fd = openSync(path, 'a')
    writeSync(fd, Buffer.alloc(512))
    closeSync(fd)
    const result = await tidemark('snapshots', 'verify', url, ...PARTITION, '--json')
    expect(result.code).toBe(1)
    expect(JSON.parse(result.stdout)).toMatchObject([{ ok: false, problems: [{ reason: 'object-size' }] }])

    const emptyUrl = pathToFileURL(tempDir()).href
    const empty = await tidemark('snapshots', 'verify', emptyUrl, '--all', ...PARTITION)
    expect(empty).toEqual({ code: 1, stdout: '', stderr: `tidemark: TIDEMARK_SNAPSHOT_NOT_FOUND: no snapshots of j/0 to verify; ${emptyUrl} holds no snapshots of any job\n` })
  })

  it('draws a progress bar when stderr is a terminal', async () => {
    const { url } = await fixture()
    const result = await tidemarkWith({ tty: true }, 'snapshots', 'verify', url, ...PARTITION)
    expect(result.code).toBe(0)
    expect(result.stderr).toMatch(/verify \[[█░]+\] 100% \| (\d+)\/\1 bytes/)
    expect(result.stderr).not.toMatch(/^verify: /m)
  })
})

describe('gc', () => {
  it('--dry-run reports what gc would delete and deletes nothing; gc then deletes exactly that', async () => {
    const { dir, url, snapshotIds } = await fixture()
    const before = tree(join(dir, 'snapshots'))
    const dry = await tidemark('gc', url, ...PARTITION, '--retain', '1', '--grace-ms', '0', '--dry-run', '--json')
    expect(dry.code).toBe(0)
    const planned = JSON.parse(dry.stdout) as { dryRun: boolean; retained: string[]; deletedManifests: string[]; deletedObjects: string[] }
    expect(planned).toMatchObject({ dryRun: true, retained: [snapshotIds[0]], deletedManifests: [`j/0/manifests/${snapshotIds[1]}.json`] })
    expect(tree(join(dir, 'snapshots'))).toEqual(before)
    const text = await tidemark('gc', url, ...PARTITION, '--retain', '1', '--grace-ms', '0', '--dry-run')
    expect(text.stdout).toContain(`would delete 1 manifests, ${planned.deletedObjects.length} data objects\n  j/0/manifests/${snapshotIds[1]}.json\n`)

    const real = JSON.parse((await tidemark('gc', url, ...PARTITION, '--retain', '1', '--grace-ms', '0', '--json')).stdout) as typeof planned
    expect(real).toMatchObject({ dryRun: false, deletedManifests: planned.deletedManifests, deletedObjects: planned.deletedObjects })
    expect(readdirSync(join(dir, 'snapshots', 'j', '0', 'manifests'))).toEqual([`${snapshotIds[0]}.json`])
  })
})

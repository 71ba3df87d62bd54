// A claim whose holder is proven dead is taken at once (docs/ownership.md,
// "A holder proven dead"): same host, boot and pid namespace, and no process
// with the holder's pid or one that started at another time. Any doubt keeps
// the lease. Lease expiry is ruled out with the `clock` option, never by waiting.
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { hostname } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { describe, expect, it, onTestFinished } from 'vitest'
import { FsSnapshotStore, acquireClaim, readClaim, type ClaimOwner, type SnapshotStore } from '../../src/index.js'
import { CLAIM_FORMAT, serializeClaim, type ClaimRecord } from '../../src/ownership/record.js'
import { ownProcessIdentity, proveHolderDead, type ProcFiles } from '../../src/ownership/holder-process.js'
import { tempDir } from '../helpers/tmp.js'

const NOW = 1_800_000_000_000
const KEY = 'job/0/owner.json'

function openStore(root = tempDir('tidemark-dead-holder-')): { store: SnapshotStore; root: string } {
  const store = new FsSnapshotStore({ root })
  onTestFinished(() => store.close())
  return { store, root }
}

/** This process's identity as a claim records it. */
function self(): ClaimOwner {
  const identity = ownProcessIdentity()
  if (identity === undefined) throw new Error('these tests need Linux with a readable /proc')
  return { id: 'feedfacefeedface', name: 'crafted', host: hostname(), pid: process.pid, ...identity }
}

/** A pid that no process has: one of a child that has exited (and been reaped). */
async function deadPid(): Promise<number> {
  const child = spawn('true', [], { stdio: 'ignore' })
  await new Promise((resolve) => child.on('exit', resolve))
  return child.pid!
}

/** Writes a claim held by `owner` with a lease live until NOW + 30 s (or by a member lease). */
async function writeClaim(store: SnapshotStore, owner: ClaimOwner, held: Partial<ClaimRecord> = {}): Promise<void> {
  const record: ClaimRecord = { format: CLAIM_FORMAT, job: 'job', partition: '0', epoch: 3, owner, leaseMs: 30_000, leaseUntil: NOW + 30_000, takenAt: NOW, ...held }
  await store.put(KEY, serializeClaim(record), { ifNoneMatch: true })
}

const acquire = (store: SnapshotStore, clock = (): number => NOW) => acquireClaim({ store, job: 'job', partition: 0, clock })
const liveLease = { code: 'TIDEMARK_OWNERSHIP_CONFLICT', details: { reason: 'live-lease' } }

describe('a holder proven dead', () => {
  it('a SIGKILLed holder on this host is taken at once with a higher epoch; while it lived, it was not', async () => {
    const { store, root } = openStore()
    const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'fixtures', 'hold-child.ts'), root], { stdio: ['ignore', 'pipe', 'inherit'] })
    onTestFinished(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL') })
    const exited = new Promise((resolve) => child.on('exit', resolve))
    const line = await createInterface({ input: child.stdout! })[Symbol.asyncIterator]().next()
    const held = JSON.parse(line.value as string) as { epoch: number; id: string; pid: number }
    // The acquirer's clock stands at the child's takenAt: its lease is live throughout.
    const takenAt = (await readClaim(store, 'job', 0))!.record!.takenAt
    await expect(acquire(store, () => takenAt)).rejects.toMatchObject(liveLease)

    child.kill('SIGKILL')
    await exited
    const claim = await acquire(store, () => takenAt)
    expect(claim.epoch).toBe(held.epoch + 1)
    expect(claim.deadHolder).toEqual({ pid: held.pid, reason: 'no-process' })
    expect(claim.previous?.owner.id).toBe(held.id)
    expect((await readClaim(store, 'job', 0))?.record).toMatchObject({ epoch: held.epoch + 1, owner: { id: claim.owner.id } })
  })

  it('a pid now used by a process that started at another time (a reused pid) is taken', async () => {
    const { store } = openStore()
    const owner = self()
    await writeClaim(store, { ...owner, startTime: owner.startTime! + 1 })
    const claim = await acquire(store)
    expect(claim.deadHolder).toEqual({ pid: process.pid, reason: 'pid-reused' })
    expect(claim.epoch).toBe(4)
  })

  it('a live holder on this host is not taken: this very process, by its pid and start time', async () => {
    const { store } = openStore()
    await writeClaim(store, self())
    await expect(acquire(store)).rejects.toMatchObject(liveLease)
  })

  for (const [what, change] of [
    ['another host name', { host: 'another-host' }],
    ['another boot of the kernel', { bootId: '00000000-0000-4000-8000-000000000000' }],
    ['another pid namespace (a container on this kernel)', { pidNamespace: 'pid:[1]' }],
  ] as const) {
    it(`a dead pid of ${what} is not taken before the lease ends, and is taken as expired after it`, async () => {
      const { store } = openStore()
      await writeClaim(store, { ...self(), pid: await deadPid(), ...change })
      await expect(acquire(store)).rejects.toMatchObject(liveLease)
      const claim = await acquire(store, () => NOW + 30_000)
      expect(claim.deadHolder).toBeUndefined()
      expect(claim.epoch).toBe(4)
    })
  }

  it("a claim without the process identity (an older version's, or off Linux) is not taken before its lease ends", async () => {
    const { store } = openStore()
    await writeClaim(store, { id: 'feedfacefeedface', name: 'old', host: hostname(), pid: await deadPid() })
    await expect(acquire(store)).rejects.toMatchObject(liveLease)
  })

  it('a claim held by a live member lease of a dead process is taken; one without a lease is too', async () => {
    const { store } = openStore()
    const member = 'job/_members/feedfacefeedface.json'
    await store.put(member, Buffer.from(JSON.stringify({ format: 'tidemark-member/1', job: 'job', id: 'feedfacefeedface', leaseMs: 30_000, leaseUntil: NOW + 30_000, startedAt: NOW })))
    const pid = await deadPid()
    await writeClaim(store, { ...self(), pid }, { leaseMs: null, leaseUntil: null, member })
    expect((await acquire(store)).deadHolder).toEqual({ pid, reason: 'no-process' })

    const other = openStore().store
    await writeClaim(other, { ...self(), pid }, { leaseMs: null, leaseUntil: null })
    expect((await acquire(other)).deadHolder).toEqual({ pid, reason: 'no-process' })
  })

  it('a new claim records this process: boot id, pid namespace and start time from /proc', async () => {
    const { store } = openStore()
    const claim = await acquire(store)
    const stat = readFileSync('/proc/self/stat', 'utf8')
    expect(claim.record.owner).toMatchObject({
      pid: process.pid,
      bootId: readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim(),
      pidNamespace: expect.stringMatching(/^pid:\[\d+\]$/),
      startTime: Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]),
    })
  })
})

describe('proveHolderDead proves nothing at any doubt', () => {
  const system: ProcFiles = {
    platform: 'linux',
    read: (path) => readFileSync(path, 'utf8'),
    readlink: (path) => (path === '/proc/self' ? String(process.pid) : path === '/proc/self/ns/pid' ? 'pid:[7]' : ''),
    hostname: () => 'here',
  }
  const fileError = (code: string): Error => Object.assign(new Error(code), { code })

  it('proves a missing pid of this host, and nothing off Linux, for an unreadable /proc, or a /proc of another pid namespace', async () => {
    const identity = ownProcessIdentity(system)!
    const owner = { host: 'here', pid: await deadPid(), ...identity }
    expect(proveHolderDead(owner, system)).toEqual({ pid: owner.pid, reason: 'no-process' })
    expect(proveHolderDead(owner, { ...system, platform: 'darwin' })).toBeUndefined()
    expect(proveHolderDead(owner, { ...system, read: (path) => { if (path.startsWith(`/proc/${owner.pid}/`)) throw fileError('EACCES'); return system.read(path) } })).toBeUndefined()
    expect(proveHolderDead(owner, { ...system, readlink: (path) => (path === '/proc/self' ? '1' : system.readlink(path)) })).toBeUndefined()
    expect(proveHolderDead(owner, { ...system, hostname: () => { throw fileError('EIO') } })).toBeUndefined()
    expect(proveHolderDead({ ...owner, startTime: undefined }, system)).toBeUndefined()
    expect(proveHolderDead({ ...owner, pid: 0 }, system)).toBeUndefined()
  })
})

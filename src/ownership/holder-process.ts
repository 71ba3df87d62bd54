import { readFileSync, readlinkSync } from 'node:fs'
import { hostname } from 'node:os'

/**
 * What tells a process apart on a Linux host beyond its pid, recorded in a
 * claim's `owner` (docs/formats.md, "Claim object"): the kernel's boot id,
 * the pid namespace the pid counts in, and the process's start time. With
 * the host name and the pid they prove, on the same host, that a holder is
 * gone (no process with that pid, or one that started at another time).
 */
export interface ProcessIdentity {
  /** `/proc/sys/kernel/random/boot_id`: one per boot of the kernel. */
  bootId: string
  /** `readlink /proc/self/ns/pid`, e.g. `pid:[4026531836]`: the namespace the pid counts in (containers on one kernel share the boot id, not this). */
  pidNamespace: string
  /** Field 22 of `/proc/<pid>/stat`: clock ticks from the boot to the process's start. */
  startTime: number
}

/** How a holder was proven dead. */
export interface DeadHolderProof {
  pid: number
  /** `no-process`: no process has that pid now; `pid-reused`: the process with that pid started at another time. */
  reason: 'no-process' | 'pid-reused'
}

/** Where the proof reads: `/proc` and the host name; tests point it elsewhere. */
export interface ProcFiles {
  platform: NodeJS.Platform
  read(path: string): string
  readlink(path: string): string
  hostname(): string
}

const SYSTEM: ProcFiles = {
  platform: process.platform,
  read: (path) => readFileSync(path, 'utf8'),
  readlink: (path) => readlinkSync(path),
  hostname,
}

let own: ProcessIdentity | null | undefined

/**
 * This process's identity, read once; undefined off Linux or when /proc
 * does not tell (then claims carry none, and nobody takes them early).
 */
export function ownProcessIdentity(files: ProcFiles = SYSTEM): ProcessIdentity | undefined {
  if (files !== SYSTEM) return readIdentity(files)
  if (own === undefined) own = readIdentity(files) ?? null
  return own ?? undefined
}

function readIdentity(files: ProcFiles): ProcessIdentity | undefined {
  if (files.platform !== 'linux') return undefined
  try {
    // A /proc of another pid namespace (mounted from outside a container)
    // would name other processes by our pids: then it proves nothing.
    if (files.readlink('/proc/self') !== String(process.pid)) return undefined
    const bootId = files.read('/proc/sys/kernel/random/boot_id').trim()
    const pidNamespace = files.readlink('/proc/self/ns/pid')
    const startTime = startTimeOf(files.read('/proc/self/stat'))
    if (bootId === '' || pidNamespace === '' || startTime === undefined) return undefined
    return { bootId, pidNamespace, startTime }
  } catch {
    return undefined
  }
}

/** Field 22 of a `/proc/<pid>/stat` line. The command name (field 2) is in parentheses and may hold spaces and parentheses: fields are counted after the last `)`. */
function startTimeOf(stat: string): number | undefined {
  const fields = stat.slice(stat.lastIndexOf(')') + 1).trim().split(/\s+/)
  // fields[0] is field 3 (the state), so field 22 is fields[19].
  const value = Number(fields[19])
  return Number.isSafeInteger(value) && value >= 0 ? value : undefined
}

/**
 * Whether the process that wrote a claim's owner record is proven dead: it
 * ran on this host (same host name, boot id and pid namespace as this
 * process) and no process has its pid now, or the one that has it started
 * at another time. Undefined at any doubt: a record without the identity
 * (written by an older Tidemark, or off Linux), another host or boot, this
 * very process, a /proc that cannot be read, not Linux.
 */
export function proveHolderDead(owner: { host: string; pid: number } & Partial<Record<keyof ProcessIdentity, unknown>>, files: ProcFiles = SYSTEM): DeadHolderProof | undefined {
  const { bootId, pidNamespace, startTime, pid } = owner
  if (typeof bootId !== 'string' || typeof pidNamespace !== 'string' || typeof startTime !== 'number' || !Number.isSafeInteger(pid) || pid <= 0) return undefined
  const self = ownProcessIdentity(files)
  if (self === undefined) return undefined
  let host: string
  try {
    host = files.hostname()
  } catch {
    return undefined
  }
  if (owner.host !== host || bootId !== self.bootId || pidNamespace !== self.pidNamespace) return undefined
  let stat: string
  try {
    stat = files.read(`/proc/${pid}/stat`)
  } catch (error) {
    // ENOENT is the one proof that no such process exists; EACCES and the rest prove nothing.
    return (error as NodeJS.ErrnoException).code === 'ENOENT' ? { pid, reason: 'no-process' } : undefined
  }
  const now = startTimeOf(stat)
  if (now === undefined || now === startTime) return undefined
  return { pid, reason: 'pid-reused' }
}

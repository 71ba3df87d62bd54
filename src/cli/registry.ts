/**
 * The commands of `tidemark`, one module per command group under commands/.
 * Each is loaded when it runs, so that a command pays only for its own
 * dependencies (positions never loads the AWS SDK or the snapshot code).
 */
import type { Command } from './context.js'

export interface CommandEntry {
  name: string
  summary: string
  load(): Promise<Command>
}

export const COMMANDS: readonly CommandEntry[] = Object.freeze([
  { name: 'jobs', summary: 'the jobs and partitions a snapshot store holds', load: async () => (await import('./commands/jobs.js')).jobs },
  { name: 'status', summary: 'who holds each partition of a job, its newest snapshot, and the member leases', load: async () => (await import('./commands/status.js')).status },
  { name: 'snapshots', summary: 'list, show and verify a partition\'s snapshots', load: async () => (await import('./commands/snapshots.js')).snapshots },
  { name: 'restore', summary: 'restore a partition store from a snapshot', load: async () => (await import('./commands/restore.js')).restore },
  { name: 'gc', summary: 'retention and garbage collection of a partition\'s snapshots (--dry-run)', load: async () => (await import('./commands/gc.js')).gc },
  { name: 'state', summary: 'read the keyed state of a store, of a snapshot, or as of an offset; migrate, drop, transform and bootstrap it', load: async () => (await import('./commands/state.js')).state },
  { name: 'log', summary: 'look at and append to an embedded file log', load: async () => (await import('./commands/log.js')).log },
  { name: 'positions', summary: 'the source positions committed in a partition store', load: async () => (await import('./commands/positions.js')).positions },
  { name: 'replay', summary: 'run a replay job over a fixed offset range into a new job', load: async () => (await import('./commands/replay.js')).replay },
])

export function findCommand(name: string): CommandEntry | undefined {
  return COMMANDS.find((c) => c.name === name)
}

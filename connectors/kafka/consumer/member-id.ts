/**
 * The member id that close({ leaveGroup: false }) leaves in stateDir for
 * the restart: the restarted process joins under it (membership.ts), so
 * that the group sees its member come back rather than a new one joining
 * while the old one still counts until its session times out. Read once at
 * start() and removed: a later start of that stateDir joins as a new member.
 */
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { Logger } from '../../../src/logging/index.js'

const FILE = '.tidemark-member.json'

export async function keepMemberId(stateDir: string, groupId: string, memberId: string, logger: Logger): Promise<void> {
  try {
    await mkdir(stateDir, { recursive: true })
    await writeFile(join(stateDir, FILE), `${JSON.stringify({ groupId, memberId })}\n`)
  } catch (error) {
    // The restart then joins as a new member: slower, nothing lost.
    logger.warn({ stateDir, err: error }, 'could not keep the member id for the restart')
  }
}

/** The member id kept for `groupId`, removed from stateDir; undefined when there is none (or it is not readable). */
export async function takeMemberId(stateDir: string, groupId: string): Promise<string | undefined> {
  const path = join(stateDir, FILE)
  const text = await readFile(path, 'utf8').catch(() => undefined)
  if (text === undefined) return undefined
  await rm(path, { force: true })
  try {
    const kept = JSON.parse(text) as { groupId?: unknown; memberId?: unknown }
    return kept.groupId === groupId && typeof kept.memberId === 'string' && kept.memberId !== '' ? kept.memberId : undefined
  } catch {
    return undefined
  }
}

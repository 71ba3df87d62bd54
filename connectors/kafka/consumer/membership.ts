/**
 * Two controls of a member's group membership that kafkajs 2.2.4 lacks,
 * made by wrapping two methods of its ConsumerGroup once, process-wide
 * (like the fixes in ../kafkajs-fixes.ts). Each acts only for a member that
 * asked, by group and member id; every other member is left alone.
 *
 * 1. A rebalance the runtime asks for itself (Java's enforceRebalance), to
 *    move a partition once its warm-up is done. A member rejoins when a
 *    heartbeat says the group is rebalancing, so heartbeat answers that,
 *    once, for a member that asked. kafkajs's runner then commits its
 *    offsets and sends a JoinGroup, which makes the coordinator start a
 *    rebalance that every other member learns of at its next heartbeat.
 *    kafkajs calls heartbeat after each fetch, also an empty one, so the
 *    rejoin starts within one fetch wait.
 * 2. A close that does not leave the group (the closest kafkajs comes to
 *    KIP-345's static membership): leave() does nothing for such a member,
 *    so the group keeps it, and its partitions, until its session times
 *    out; and the restart joins under the same member id (joinAndSync
 *    starts with the id that the consumer's assigner hands it), so
 *    the group sees the member come back instead of a new one joining
 *    while the old one still counts. A coordinator that no longer knows the
 *    id answers UNKNOWN_MEMBER_ID, and kafkajs joins again without it.
 */
import { kafkajs224 } from '../kafkajs-fixes.js'

interface ConsumerGroup {
  groupId: string
  memberId: string | null
  assigners: ReadonlyArray<{ [RESUME_MEMBER]?: () => string | undefined }>
  heartbeat(options: { interval: number }): Promise<void>
  leave(): Promise<void>
  joinAndSync(): Promise<void>
}

const WRAPPED = Symbol.for('tidemark.rejoin')
/** On an assigner object that kafkajs made from a StatefulConsumer's factory: the member id to join under, until a join succeeds. */
export const RESUME_MEMBER = Symbol.for('tidemark.resume-member')
/** Rejoins asked for and not begun yet, as `groupId\0memberId`. */
const requested = new Set<string>()
/** Members whose next leave() does nothing, as `groupId\0memberId`. */
const staying = new Set<string>()

function wrap(): boolean {
  const proto = kafkajs224<{ prototype: Partial<ConsumerGroup> & { [WRAPPED]?: true } }>('kafkajs/src/consumer/consumerGroup.js')?.prototype
  if (proto === undefined || typeof proto.heartbeat !== 'function' || typeof proto.leave !== 'function' || typeof proto.joinAndSync !== 'function') return false
  if (proto[WRAPPED] === true) return true
  const { heartbeat, leave, joinAndSync } = proto
  proto.heartbeat = function heartbeatOrRejoin(this: ConsumerGroup, options: { interval: number }): Promise<void> {
    if (requested.size > 0 && requested.delete(`${this.groupId}\0${this.memberId}`)) {
      // What kafkajs's isRebalancing() looks for: the runner answers it with a rejoin.
      return Promise.reject(Object.assign(new Error('Tidemark asked this member to rejoin the group'), { name: 'KafkaJSProtocolError', type: 'REBALANCE_IN_PROGRESS', retriable: false }))
    }
    return heartbeat.call(this, options)
  }
  proto.leave = function leaveUnlessStaying(this: ConsumerGroup): Promise<void> {
    if (staying.size > 0 && staying.delete(`${this.groupId}\0${this.memberId}`)) return Promise.resolve()
    return leave.call(this)
  }
  proto.joinAndSync = function joinAndSyncAsBefore(this: ConsumerGroup): Promise<void> {
    if (this.memberId === null || this.memberId === undefined) {
      for (const assigner of this.assigners ?? []) {
        const id = assigner[RESUME_MEMBER]?.()
        if (id !== undefined) {
          this.memberId = id
          break
        }
      }
    }
    return joinAndSync.call(this)
  }
  proto[WRAPPED] = true
  return true
}

/** Whether this kafkajs can be asked to rejoin and to close without leaving (kafkajs 2.2.4). */
export const canRejoin = wrap()

/** Makes the member `memberId` of `groupId` rejoin at its next heartbeat; false when this kafkajs cannot be asked. */
export function requestRejoin(groupId: string, memberId: string): boolean {
  if (!canRejoin) return false
  requested.add(`${groupId}\0${memberId}`)
  return true
}

/** Forgets a request not begun yet (the member closed, or rejoined by itself). */
export function cancelRejoin(groupId: string, memberId: string): void {
  requested.delete(`${groupId}\0${memberId}`)
}

/** Makes the next leave() of the member a no-op (it stays in the group until its session times out); false when this kafkajs cannot. */
export function stayInGroup(groupId: string, memberId: string): boolean {
  if (!canRejoin) return false
  staying.add(`${groupId}\0${memberId}`)
  return true
}

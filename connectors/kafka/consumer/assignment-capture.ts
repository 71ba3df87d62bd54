/**
 * kafkajs 2.2.4 decodes a member's assignment (the SyncGroup answer) and
 * keeps only its active partitions: the GROUP_JOIN event carries neither the
 * userData nor the generation. The state-aware assignor sends each member,
 * in that userData, its standbys, its warm-ups, the partitions whose
 * previous owner left the group (taken without waiting for a release) and
 * the member's id. So the decoder that kafkajs's consumer groups share
 * (AssignerProtocol.MemberAssignment.decode, one object, looked up at each
 * call) is wrapped once, process-wide, when tidemark/kafka is loaded: it
 * decodes as before and also files our userData under the member id it
 * names, where the member's GROUP_JOIN handler takes it. Assignments of
 * other assignors carry no such userData and are left alone.
 */
import { AssignerProtocol } from '../kafkajs.js'
import { decodeAssignmentInfo, type AssignmentInfo } from './assignor-metadata.js'

/** Assignments decoded and not taken yet, by member id; bounded, since a plain kafkajs consumer of this process never takes its own. */
const received = new Map<string, AssignmentInfo>()
const MAX_KEPT = 64
const WRAPPED = Symbol.for('tidemark.assignment-capture')

type Decode = typeof AssignerProtocol.MemberAssignment.decode
const protocol = AssignerProtocol.MemberAssignment as { decode: Decode & { [WRAPPED]?: true } }
if (protocol.decode[WRAPPED] !== true) {
  const original = protocol.decode
  const wrapped = ((buffer: Buffer) => {
    const decoded = original(buffer)
    const userData = decoded?.userData
    if (userData !== null && userData !== undefined && userData.length > 0) {
      const { value } = decodeAssignmentInfo(userData)
      if (value?.memberId !== undefined) {
        received.delete(value.memberId)
        received.set(value.memberId, value)
        for (const key of received.keys()) {
          if (received.size <= MAX_KEPT) break
          received.delete(key)
        }
      }
    }
    return decoded
  }) as Decode & { [WRAPPED]?: true }
  wrapped[WRAPPED] = true
  protocol.decode = wrapped
}

/** The state-aware assignor's part of the assignment that `memberId` received last, once; undefined under another assignor. */
export function takeAssignmentInfo(memberId: string): AssignmentInfo | undefined {
  const info = received.get(memberId)
  received.delete(memberId)
  return info
}

// Delivery messages: the approved sends of a decided batch, grouped for the delivery queue.
import type { CampaignBatch } from "./campaign-batch.ts";
import type { CapDecision } from "./decisions.ts";

export interface DeliverySend {
  userId: number;
  segment: string;
  /** Deterministic: the same send always has the same id, so the delivery side can drop repeats. */
  dedupeId: string;
}

export interface DeliveryMessage {
  campaignId: string;
  channel: string;
  payload?: unknown;
  sends: DeliverySend[];
}

/** What the consumer needs from the delivery queue: every message sent, or a rejection saying which were not. */
export interface DeliverySink {
  send(messages: readonly DeliveryMessage[]): Promise<void>;
}

export const DEFAULT_DELIVERY_BATCH_SIZE = 100;

export function dedupeId(campaignId: string, channel: string, userId: number): string {
  return `${campaignId}:${channel}:${userId}`;
}

/**
 * Forwarded: allowed, duplicate (the dedupe id makes it safe) and exempt sends, each user once; capped
 * sends are dropped.
 */
export function deliveryMessages(
  batch: Pick<CampaignBatch, "campaignId" | "channel" | "payload">,
  decisions: readonly CapDecision[],
  sendsPerMessage: number,
): DeliveryMessage[] {
  const messages: DeliveryMessage[] = [];
  let current: DeliverySend[] = [];
  const flush = () => {
    if (current.length === 0) return;
    const message: DeliveryMessage = { campaignId: batch.campaignId, channel: batch.channel, sends: current };
    if (batch.payload !== undefined) message.payload = batch.payload;
    messages.push(message);
    current = [];
  };
  const seen = new Set<number>();
  for (const { userId, segment, decision } of decisions) {
    if (decision === "capped" || seen.has(userId)) continue;
    seen.add(userId);
    current.push({ userId, segment, dedupeId: dedupeId(batch.campaignId, batch.channel, userId) });
    if (current.length === sendsPerMessage) flush();
  }
  flush();
  return messages;
}

// `.local/endpoints.json`: where the local stack says its parts listen (docs/OPERATIONS.md, "The local stack").

export const ENDPOINTS_FILE = ".local/endpoints.json";

export interface Endpoints {
  /** The check API's local Function URL. */
  functionUrl: string;
  /** The check API's quota-sync URL: `POST /v1/quotas/sync` alone (what `grantQuotaSync` grants on AWS). */
  quotaSyncUrl: string;
  awsEndpoint: string;
  region: string;
  bucket: string;
  campaignQueueUrl: string;
  deliveryQueueUrl: string;
  /** The campaign queue's DLQ. */
  deadLetterQueueUrl: string;
  deliveryDeadLetterQueueUrl: string;
  /** Every Redis node, primaries and replicas. */
  redis: string[];
}

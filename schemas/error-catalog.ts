/**
 * Every error the API can answer, by its stable code. The status and default message live
 * here once; routes throw these, the root error handler renders them, and the OpenAPI
 * document lists them per status.
 */
export const errorCatalog = {
  INVALID_BODY: { status: 400, message: 'The request body is invalid' },
  INVALID_JSON: { status: 400, message: 'The request body is not valid JSON' },
  INVALID_URL: { status: 400, message: 'The request URL is malformed' },
  MALFORMED_REQUEST: { status: 400, message: 'The request is not valid HTTP/1.1' },
  INVALID_FORWARDED_FOR: { status: 400, message: 'X-Forwarded-For does not name a client address' },
  INVALID_WORKLOAD_IDENTITY: { status: 400, message: 'The workload identity header from the mesh sidecar is malformed' },
  AMBIGUOUS_HEADER: { status: 400, message: 'A header that says who the caller is (X-Forwarded-For, End-User-IP, the mesh identity header) appears more than once' },
  INVALID_END_USER_IP: { status: 400, message: 'End-User-IP must be one IPv4 or IPv6 address' },
  END_USER_IP_NOT_ALLOWED: { status: 400, message: 'End-User-IP may only be sent with a secret key: a browser does not choose its own source' },
  END_USER_IP_REQUIRED: { status: 400, message: 'This tenant requires End-User-IP, the address of the end user a request is made for' },
  IDEMPOTENCY_KEY_UNSCOPED: { status: 400, message: 'A restricted key\'s Idempotency-Key is kept per visitor, and this request came through the mesh from a workload that is not a gateway of MESH_GATEWAY_IDENTITIES, or without a workload identity, so its visitor cannot be told apart from any other: send it without Idempotency-Key, or route browsers through a named gateway' },
  INVALID_EMAIL: { status: 400, message: 'The email address is not acceptable' },
  LOCALE_NOT_AVAILABLE: { status: 400, message: 'The tenant has no message wording in this language' },
  INVALID_CODE_FORMAT: { status: 400, message: 'The code must be exactly 6 digits' },
  CODE_MISMATCH: { status: 400, message: 'The code is incorrect, expired or already used' },
  RECEIPT_INVALID: { status: 400, message: 'The receipt is malformed, not signed by this service, or issued to another tenant or mode' },
  RECEIPT_EXPIRED: { status: 400, message: 'The receipt has expired' },
  RECEIPT_ADDRESS_MISMATCH: { status: 400, message: 'The receipt was issued for another address' },
  RECEIPT_ADDRESS_REQUIRED: { status: 400, message: 'Send the address your user claims as `email` (or `anyAddress: true` to redeem for any address)' },
  SNS_MESSAGE_INVALID: { status: 400, message: 'The body is not a well-formed SNS message' },
  SNS_MESSAGE_STALE: { status: 400, message: 'The SNS message is older than SNS\'s one-hour retry window' },
  UNAUTHORIZED: { status: 401, message: 'A valid API key is required: Authorization: Bearer <key>' },
  QUOTA_EXCEEDED: { status: 402, message: 'The volume allowance of this billing tier is used up' },
  ORIGIN_NOT_ALLOWED: { status: 403, message: 'This origin is not allowed for this key' },
  SECRET_KEY_IN_BROWSER: { status: 403, message: 'Secret keys must not be used from a browser; use a restricted key' },
  KEY_NOT_PERMITTED: { status: 403, message: 'This key is not permitted to call this endpoint' },
  WORKLOAD_NOT_ALLOWED: { status: 403, message: 'This key is bound to other workloads: call it from one of them, through the mesh' },
  SOURCE_BLOCKED: { status: 403, message: 'Requests from this network are not accepted' },
  CAPTCHA_REQUIRED: { status: 403, message: 'This key needs a CAPTCHA token: send the widget\'s answer in the Captcha-Token header' },
  CAPTCHA_INVALID: { status: 403, message: 'The CAPTCHA token was refused (wrong, expired or already used): solve the challenge again' },
  TENANT_SENDING_PAUSED: { status: 403, message: 'Live sending of this tenant is paused: its mail bounced or drew complaints past the service\'s thresholds. Sandbox keys keep working and codes already sent still verify; ask the operator to resume it once the address list is cleaned' },
  RECIPIENT_BLOCKED: { status: 403, message: 'Codes cannot be sent to this address' },
  SNS_TOPIC_NOT_ALLOWED: { status: 403, message: 'The SNS topic is not one of SES_FEEDBACK_TOPIC_ARNS' },
  SNS_CERT_URL_NOT_ALLOWED: { status: 403, message: 'The SNS signing certificate URL does not match SNS_SIGNING_CERT_URL_PATTERN' },
  SNS_SIGNATURE_INVALID: { status: 403, message: 'The SNS message signature does not verify' },
  NOT_FOUND: { status: 404, message: 'Not found' },
  METHOD_NOT_ALLOWED: { status: 405, message: 'This method is not allowed here; see the Allow header' },
  REQUEST_TIMEOUT: { status: 408, message: 'The request did not arrive in time' },
  PAYLOAD_TOO_LARGE: { status: 413, message: 'The request body is too large' },
  UNSUPPORTED_MEDIA_TYPE: { status: 415, message: 'Send the body as application/json' },
  HEADERS_TOO_LARGE: { status: 431, message: 'The request headers are too large' },
  RECIPIENT_SUPPRESSED: { status: 422, message: 'This address bounced permanently or marked a message as spam: no code is sent to it until the suppression ends or is lifted (POST /recipients/unsuppress)' },
  IDEMPOTENCY_MISMATCH: { status: 422, message: 'This Idempotency-Key was used with a different request body' },
  IDEMPOTENCY_IN_FLIGHT: { status: 409, message: 'A request with this Idempotency-Key is still in progress' },
  IDEMPOTENCY_OUTCOME_UNKNOWN: { status: 409, message: 'The first request with this Idempotency-Key may have sent a code, and its answer could not be recorded: the key does not run again within 24 hours of that request. Dispatch with a new key to send a new code' },
  RECEIPT_ALREADY_REDEEMED: { status: 409, message: 'The receipt was already redeemed' },
  RECEIPT_NOT_REDEEMABLE: { status: 409, message: 'The receipt was issued before the service last lost its record of redemptions (a restart without Redis, or Redis losing its data) and can no longer be redeemed: verify the address again' },
  RATE_LIMITED: { status: 429, message: 'Too many requests; retry later' },
  INTERNAL: { status: 500, message: 'Internal error' },
  DELIVERY_FAILED: { status: 502, message: 'The code could not be delivered; nothing was charged' },
  UNAVAILABLE: { status: 503, message: 'The service is temporarily unavailable; retry later' },
  TENANT_MISCONFIGURED: { status: 503, message: 'This key\'s tenant is not served: its configuration breaks a rule of the service. Its operator is told; retry once it is fixed' }
} as const satisfies Record<string, { status: number, message: string }>

export type ErrorCode = keyof typeof errorCatalog

export const errorCodes = Object.keys(errorCatalog) as ErrorCode[]

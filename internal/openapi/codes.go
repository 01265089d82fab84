package openapi

import (
	"slices"

	"github.com/xemahq/xema/internal/approval"
	"github.com/xemahq/xema/internal/binding"
	"github.com/xemahq/xema/internal/capacity"
	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/connection"
	"github.com/xemahq/xema/internal/connector"
	"github.com/xemahq/xema/internal/credential"
	"github.com/xemahq/xema/internal/egress"
	"github.com/xemahq/xema/internal/exchange"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/federation"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/grant"
	"github.com/xemahq/xema/internal/idempotency"
	"github.com/xemahq/xema/internal/metatool"
	"github.com/xemahq/xema/internal/ratelimit"
	"github.com/xemahq/xema/internal/runner"
	"github.com/xemahq/xema/internal/server"
	"github.com/xemahq/xema/internal/unauth"
)

// Codes is every code the gateway declares for its error answers, sorted: the Code
// constants of its packages, in one place. The Error schema lists them (x-codes), and
// TestEveryCodeListed fails when a Code constant of the module is missing here, so a new
// code cannot go undocumented.
var Codes = sorted(
	approval.CodeAlreadyDecided, approval.CodeApproverNotHuman, approval.CodeAudienceIncompatible, approval.CodeExpired,
	approval.CodeGrantNotInEffect, approval.CodeInvalidCursor, approval.CodeNotApprover, approval.CodeNotFound,
	approval.CodeOrgMismatch, approval.CodeOwnApproval, approval.CodeRejected, approval.CodeTooManyPending,
	approval.CodeWithdrawn,
	binding.CodeExists, binding.CodeInvalid, binding.CodeMissingBinding, binding.CodeNotFound,
	binding.CodeUnknownConversation,
	capacity.CodeExceeded, capacity.CodeProviderBusy,
	catalog.CodeDryRunBusy, catalog.CodeDryRunUnavailable, catalog.CodeGrantNotActive, catalog.CodeGrantNotFound,
	catalog.CodeGrantUnchanged,
	connection.CodeAuthorizationFailed, connection.CodeExpired, connection.CodeInvalidOAuthServer, connection.CodeInvalidState,
	connection.CodeNotFound, connection.CodeRequired, connection.CodeTokenUnavailable, connection.CodeUnknownProvider,
	connection.CodeOrgAdminOnly, connection.CodePersonOnly,
	connector.CodeBindingInvalid, connector.CodeBranchNotFound, connector.CodeChangeRequestExists,
	connector.CodeConversationGone, connector.CodeCredentialForbidden, connector.CodeCredentialRejected,
	connector.CodeNotFound, connector.CodeNotMergeable, connector.CodeRateLimited, connector.CodeRepositoryNotFound,
	credential.CodeInUse, credential.CodeInvalid, credential.CodeMissingCredential, credential.CodeNotFound,
	credential.CodeUnavailable,
	egress.CodeDenied, egress.CodeRedirect,
	fault.CodeInternal, fault.CodeInvalidArgument, fault.CodeStoreUnavailable,
	federation.CodeInvalidServer, federation.CodeInvalidTool, federation.CodeProtocolError,
	federation.CodeProviderTaken, federation.CodeServerExists, federation.CodeSyncConflict,
	federation.CodeToolCollision, federation.CodeToolError, federation.CodeUnknownServer,
	gateway.CodeApprovalUnavailable, gateway.CodeAuditUnavailable, gateway.CodeDenied, gateway.CodeInterrupted,
	gateway.CodeInvalidInput, gateway.CodeInvalidOutput, gateway.CodeNoRunner, gateway.CodeOutcomeNotRecorded,
	gateway.CodePendingApproval, gateway.CodePolicyUnavailable, gateway.CodeUnknownCapability,
	gateway.CodeVersionChanged,
	gateway.CodeTxnTokenFailed,
	exchange.CodeFailed,
	grant.CodeInvalidDuration, grant.CodeInvalidGlob, grant.CodeInvalidJSON, grant.CodeInvalidLimit,
	grant.CodeInvalidSubject, grant.CodeInvalidType, grant.CodeInvalidValue, grant.CodeMissingField,
	grant.CodeStaleDigest, grant.CodeUnknownBiomeVersion, grant.CodeUnknownCapability, grant.CodeUnknownEnvironment,
	grant.CodeUnknownField, grant.CodeUnknownProfile,
	idempotency.CodeInvalidKey, idempotency.CodeKeyInUse, idempotency.CodeKeyReused, idempotency.CodeResultUnreadable,
	metatool.CodeInvalidCursor,
	ratelimit.CodeQuotaExceeded, ratelimit.CodeRateLimited,
	runner.CodeBadResponse, runner.CodeHandlerFailed, runner.CodeNoToken, runner.CodeProviderError,
	runner.CodeProviderTimeout, runner.CodeUnreachable,
	server.CodeBadRequest, server.CodeBodyTooLarge, server.CodeInvalidRequest, server.CodeMalformedArguments,
	server.CodeMalformedJSON, server.CodeMethodNotAllowed, server.CodeNotADenial, server.CodeNotReady,
	server.CodeRequestTimeout, server.CodeUnknownAuditID, server.CodeUnsupportedMediaType,
	unauth.CodeUnauthenticated,
)

// sorted is codes sorted, each once (a package may re-export another's code).
func sorted(codes ...string) []string {
	slices.Sort(codes)
	return slices.Compact(codes)
}

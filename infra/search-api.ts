/**
 * The HTTP API in front of the planner: `POST /search` only, IAM (SigV4) or JWT authorization,
 * stage throttling, and JSON access logs.
 * @module
 */
import { RemovalPolicy } from "aws-cdk-lib";
import { AccessLogFormat } from "aws-cdk-lib/aws-apigateway";
import {
  HttpApi,
  HttpMethod,
  type HttpRoute,
  type HttpRouteIntegrationBindOptions,
  HttpStage,
  type IHttpRouteAuthorizer,
  LogGroupLogDestination,
} from "aws-cdk-lib/aws-apigatewayv2";
import { HttpIamAuthorizer, HttpJwtAuthorizer } from "aws-cdk-lib/aws-apigatewayv2-authorizers";
import { HttpLambdaIntegration } from "aws-cdk-lib/aws-apigatewayv2-integrations";
import { ServicePrincipal } from "aws-cdk-lib/aws-iam";
import type { IFunction } from "aws-cdk-lib/aws-lambda";
import { LogGroup, RetentionDays } from "aws-cdk-lib/aws-logs";
import { Construct } from "constructs";

/** Who may call the API. */
export type SearchApiAuth =
  /** Callers sign requests with SigV4 and need `execute-api:Invoke` on the route. */
  | { readonly type: "iam" }
  /** Callers send `Authorization: Bearer <JWT>` issued by `issuer` for one of `audience`. */
  | { readonly type: "jwt"; readonly issuer: string; readonly audience: readonly string[] };

/** Steady-state requests per second and burst of the stage. */
export interface SearchApiThrottle {
  /** @default 20 */
  readonly rateLimit?: number;
  /** Requests admitted at once; the planner's reserved concurrency follows it. @default 40 */
  readonly burstLimit?: number;
}

export const DEFAULT_THROTTLE = { rateLimit: 20, burstLimit: 40 } as const;

/**
 * The throttle with its defaults.
 * @throws TypeError for a rate outside (0, 10000] or a burst that is not an integer 1..5000.
 */
export function resolveThrottle(throttle: SearchApiThrottle = {}): Required<SearchApiThrottle> {
  const rateLimit = throttle.rateLimit ?? DEFAULT_THROTTLE.rateLimit;
  const burstLimit = throttle.burstLimit ?? DEFAULT_THROTTLE.burstLimit;
  if (!(Number.isFinite(rateLimit) && rateLimit > 0 && rateLimit <= 10_000)) {
    throw new TypeError(
      `Expected throttle.rateLimit to be in (0, 10000] requests/s, got ${rateLimit}`,
    );
  }
  if (!(Number.isInteger(burstLimit) && burstLimit >= 1 && burstLimit <= 5000)) {
    throw new TypeError(`Expected throttle.burstLimit to be an integer 1..5000, got ${burstLimit}`);
  }
  return { rateLimit, burstLimit };
}

export interface SearchApiProps {
  /** The planner function. */
  readonly handler: IFunction;
  /** @default { type: "iam" } */
  readonly auth?: SearchApiAuth;
  /**
   * Each search fans out to up to `maxTasks` segment-search invocations, so the API rate bounds
   * the functions' concurrency. @default { rateLimit: 20, burstLimit: 40 }
   */
  readonly throttle?: SearchApiThrottle;
  /** @default RetentionDays.ONE_MONTH */
  readonly accessLogRetention?: RetentionDays;
  /** @default RemovalPolicy.DESTROY */
  readonly logRemovalPolicy?: RemovalPolicy;
}

/** Fields of each access log line (HTTP API `$context` variables). */
const ACCESS_LOG_FIELDS = {
  requestId: "$context.requestId",
  time: "$context.requestTime",
  ip: "$context.identity.sourceIp",
  userAgent: "$context.identity.userAgent",
  caller: "$context.identity.userArn",
  subject: "$context.authorizer.claims.sub",
  method: "$context.httpMethod",
  route: "$context.routeKey",
  status: "$context.status",
  responseLength: "$context.responseLength",
  latencyMs: "$context.responseLatency",
  integrationLatencyMs: "$context.integrationLatency",
  integrationStatus: "$context.integrationStatus",
  integrationError: "$context.integrationErrorMessage",
  authorizerError: "$context.authorizer.error",
} as const;

/**
 * A Lambda integration whose invoke permission is the route's own ARN, method included (any
 * stage, `POST`, `/search`), where CDK's own grants the path to any method.
 */
class RouteLambdaIntegration extends HttpLambdaIntegration {
  readonly #id: string;
  readonly #handler: IFunction;

  constructor(id: string, handler: IFunction) {
    super(id, handler);
    this.#id = id;
    this.#handler = handler;
  }

  protected override completeBind(options: HttpRouteIntegrationBindOptions): void {
    this.#handler.addPermission(`${this.#id}-Permission`, {
      scope: options.scope,
      principal: new ServicePrincipal("apigateway.amazonaws.com"),
      sourceArn: options.route.routeArn,
    });
  }
}

/** The search API. */
export class SearchApi extends Construct {
  readonly api: HttpApi;
  readonly stage: HttpStage;
  readonly route: HttpRoute;
  readonly accessLogs: LogGroup;
  /** `https://<id>.execute-api.<region>.amazonaws.com/search` */
  readonly searchUrl: string;

  /** @throws TypeError for a JWT issuer that is not https, an empty audience, or bad throttling. */
  constructor(scope: Construct, id: string, props: SearchApiProps) {
    super(scope, id);
    const authorizer = this.#authorizer(props.auth ?? { type: "iam" });
    const { rateLimit, burstLimit } = resolveThrottle(props.throttle);

    this.api = new HttpApi(this, "Api", {
      description: "lance-fanout: POST /search",
      createDefaultStage: false,
    });
    this.accessLogs = new LogGroup(this, "AccessLogs", {
      retention: props.accessLogRetention ?? RetentionDays.ONE_MONTH,
      removalPolicy: props.logRemovalPolicy ?? RemovalPolicy.DESTROY,
    });
    this.stage = new HttpStage(this, "DefaultStage", {
      httpApi: this.api,
      stageName: "$default",
      autoDeploy: true,
      throttle: { rateLimit, burstLimit },
      accessLogSettings: {
        destination: new LogGroupLogDestination(this.accessLogs),
        format: AccessLogFormat.custom(JSON.stringify(ACCESS_LOG_FIELDS)),
      },
    });
    const [route] = this.api.addRoutes({
      path: "/search",
      methods: [HttpMethod.POST],
      integration: new RouteLambdaIntegration("Planner", props.handler),
      authorizer,
    });
    if (!route) throw new Error("HttpApi.addRoutes returned no route");
    this.route = route;
    // The $default stage URL ends with "/".
    this.searchUrl = `${this.stage.url}search`;
  }

  #authorizer(auth: SearchApiAuth): IHttpRouteAuthorizer {
    if (auth.type === "iam") return new HttpIamAuthorizer();
    if (auth.type !== "jwt") {
      throw new TypeError(
        `Expected auth.type "iam" or "jwt", got "${(auth as { type: unknown }).type}"`,
      );
    }
    if (!/^https:\/\/[^\s/]+/.test(auth.issuer)) {
      throw new TypeError(`Expected auth.issuer to be an https:// URL, got "${auth.issuer}"`);
    }
    if (auth.audience.length === 0 || auth.audience.some((a) => a.trim() === "")) {
      throw new TypeError(
        "Expected auth.audience to list at least one non-empty audience (client id)",
      );
    }
    return new HttpJwtAuthorizer("JwtAuthorizer", auth.issuer, { jwtAudience: [...auth.audience] });
  }
}
